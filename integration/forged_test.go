//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/events"
	"kvlive/rollout"
)

// TestForgedMessagesAreDeadLettered publishes, as any client of the bus
// could, a well-formed plan no planner made (moving a real VM to another
// instance type), a change event for a generation the instance type never
// reached, and one for its current generation with a spec it never had.
// Each ends as one dead letter saying why; nothing is planned for the
// events, and no VM is written (the audit log).
func TestForgedMessagesAreDeadLettered(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 6}})
	e.runKvlive("all stages")
	e.waitGenerations()

	vm := e.shapes[0]
	from := events.Ref{Kind: events.KindClusterInstancetype, Name: vm.instancetype}
	plan := events.Plan{EventID: "switch/forged", VM: events.VMRef{Namespace: vm.namespace, Name: vm.name, UID: e.uids[vm.key()]},
		Action: events.ResultLive, Target: events.Target{Move: events.MoveSwitch, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: itLarge}, From: &from}}
	e.publish(events.PlanSubject(vm.namespace, plan.EventID), events.PlanID(plan.EventID, plan.VM.UID), events.TypePlan, &plan)

	it := e.instancetype(itMedium)
	spec, err := json.Marshal(it.Spec)
	if err != nil {
		t.Fatal(err)
	}
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: itMedium}
	ahead := events.Changed{Object: ref, UID: string(it.UID), Generation: it.Generation + 5, OldGeneration: it.Generation, NewSpec: spec, ObservedAt: time.Now()}
	aheadID := events.EventID(events.KindClusterInstancetype, string(it.UID), ahead.Generation)
	e.publish(events.ChangedSubject(ref.Kind), aheadID, events.TypeInstancetypeChanged, &ahead)
	fake := it.Spec.DeepCopy()
	fake.CPU.Guest = 64
	fakeSpec, _ := json.Marshal(fake)
	forgedSpec := events.Changed{Object: ref, UID: string(it.UID), Generation: it.Generation, NewSpec: fakeSpec, ObservedAt: time.Now()}
	e.publish(events.ChangedSubject(ref.Kind), "forged/spec", events.TypeInstancetypeChanged, &forgedSpec)

	var reasons []string
	for _, m := range e.deadLetters(3) {
		reasons = append(reasons, m.Header.Get(events.HeaderDeadReason))
	}
	slices.Sort(reasons)
	for _, want := range []string{
		"event switch/forged has no rollout record",
		"is at generation " + itoa(it.Generation) + ", not at the event's " + itoa(ahead.Generation),
		"the event's spec is not clusterinstancetype/" + itMedium + "'s at generation " + itoa(it.Generation),
	} {
		if !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, want) }) {
			t.Errorf("no dead letter says %q: %q", want, reasons)
		}
	}
	for _, id := range []string{aheadID, "forged/spec", plan.EventID} {
		if _, ok, err := rollout.Record(e.ctx, e.js, id); err != nil || ok {
			t.Errorf("%s: recorded %v (%v); a forged event must plan nothing", id, ok, err)
		}
	}
	if w := e.kvliveWrites(); len(w) != 0 {
		t.Errorf("kvlive wrote VMs for forged messages: %v", w)
	}
}

// publish stores a payload on subject as any NATS client could.
func (e *env) publish(subject, id, typ string, p events.Payload) {
	e.t.Helper()
	body, err := events.Encode(typ, id, "forger", "", time.Now(), p)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(e.ctx, events.NewMsg(subject, id, typ, body)); err != nil {
		e.t.Fatal(err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestAPlanAfterTheRolloutSettledIsDeadLettered: a plan published under a
// real event id for a VM its rollout moved, once the rollout has settled,
// is one dead letter and writes nothing (the audit log), though the VM's
// pin was set back meanwhile so that a write would move it.
func TestAPlanAfterTheRolloutSettledIsDeadLettered(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 6}})
	e.runKvlive("all stages, a one-minute horizon", "--max-age", "1m")
	e.waitGenerations()

	s := e.shapes[0]
	vms := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace)
	before, err := vms.Get(e.ctx, s.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: e.selectShapes(onInstancetype(itMedium)), action: vmShape.expected, revision: revisionOf(it), clean: true})
	store, err := rollout.Open(e.ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("the rollout marked settled", 2*time.Minute, func() (bool, string) {
		c, _, err := store.Get(e.ctx, eventID)
		return err == nil && !c.Settled.IsZero(), fmt.Sprintf("%+v %v", c, err)
	})

	vm, err := vms.Get(e.ctx, s.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Status.InstancetypeRef = before.Status.InstancetypeRef
	if _, err := vms.UpdateStatus(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	plan := events.Plan{EventID: eventID, VM: events.VMRef{Namespace: s.namespace, Name: s.name, UID: e.uids[s.key()]}, Action: s.expected(),
		Target: events.Target{Move: events.MoveRepin, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: itMedium}, UID: string(it.UID), Generation: it.Generation}}
	e.publish(events.PlanSubject(s.namespace, eventID), events.PlanID(eventID, plan.VM.UID)+"/late", events.TypePlan, &plan)
	dead := e.deadLetters(1)
	if reason := dead[0].Header.Get(events.HeaderDeadReason); !strings.Contains(reason, "settled at") {
		t.Errorf("dead letter says %q, want the rollout settled", reason)
	}
	if w := e.kvliveWrites()[s.key()]; w.applied() != 1 {
		t.Errorf("kvlive patched %s %d times (%+v), want once, by the rollout", s.key(), w.applied(), w)
	}
}
