//go:build integration

package integration

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/rollout"
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
