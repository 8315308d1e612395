package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/cmd/kvlive/pipeline"
	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/readmodel/inspect"
	"kvlive/rollout"
)

// settled waits until durable on stream has handled every message stored
// so far.
func settled(t *testing.T, js jetstream.JetStream, stream, durable string) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	testenv.Eventually(t, time.Minute, "consumer "+durable+" done with "+stream, func() bool {
		c, err := s.Consumer(ctx, durable)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= last && ci.NumAckPending == 0 && ci.NumPending == 0
	})
}

// canarySwitch switches the parity=0 VMs of u1 to u2, one canary first,
// then batches of 5 that wait for a promote, and waits until the canary
// moved: ns-0/vm-00, first by namespace and name.
func canarySwitch(t *testing.T, js jetstream.JetStream) (string, rollout.Account) {
	t.Helper()
	ctx := context.Background()
	id, err := rollout.RequestSwitch(ctx, js, events.SwitchRequest{
		From:     events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"},
		To:       events.Ref{Kind: events.KindClusterInstancetype, Name: "u2"},
		Selector: "parity=0",
		Policy:   &events.Policy{Canary: "1", BatchSize: "5", Pause: events.PauseManual},
	})
	if err != nil {
		t.Fatal(err)
	}
	var acct rollout.Account
	testenv.Eventually(t, time.Minute, "the canary moved", func() bool {
		acct, err = rollout.AccountOf(ctx, js, id)
		return err == nil && len(acct.Latest) == 1
	})
	if o := acct.Latest["uid-vm-00"]; !o.Wrote || o.Batch != 0 {
		t.Fatalf("canary outcomes %v, want vm-00 moved in the first batch", acct.Latest)
	}
	return id, acct
}

// TestARedeliveredEventKeepsItsBatches: the first planning of an event is
// its record. A switch request delivered again after a VM that sorts first
// joined the selection is not planned into new batches: the new VM is not
// the rollout's, the canary stays the only VM written before the gate, and
// the record is the first one.
func TestARedeliveredEventKeepsItsBatches(t *testing.T) {
	clients, js, w := start(t)
	ctx := context.Background()
	id, _ := canarySwitch(t, js)
	before, _, err := rollout.Record(ctx, js, id)
	if err != nil {
		t.Fatal(err)
	}

	// A stopped VM that sorts before vm-00 joins the selection, and the
	// stand-in pins it.
	halted := virtv1.RunStrategyHalted
	newVM := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "a-new", Namespace: "ns-0", UID: "uid-a-new", Labels: map[string]string{"parity": "0"}},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &halted, Instancetype: &virtv1.InstancetypeMatcher{Name: "u1"},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"}}},
	}
	if _, err := clients.Virt.KubevirtV1().VirtualMachines("ns-0").Create(ctx, newVM, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "a-new pinned", func() bool {
		vm, err := clients.Virt.KubevirtV1().VirtualMachines("ns-0").Get(ctx, "a-new", metav1.GetOptions{})
		return err == nil && vm.Status.InstancetypeRef != nil && vm.Status.InstancetypeRef.ControllerRevisionRef != nil
	})

	// The request again, as a redelivery after a lost ack would bring it.
	redeliver(t, js, events.SwitchSubject())
	settled(t, js, events.StreamEvents, events.ConsumerPlanner)
	settled(t, js, events.StreamPlans, events.ConsumerApplier)

	if n := w.get("ns-0/a-new"); n != 0 {
		t.Errorf("a-new, not in the rollout when it was planned, was patched %d times", n)
	}
	if n := w.total(); n != 1 {
		t.Errorf("%d VMs patched before the canary's gate was promoted, want 1 (the canary)", n)
	}
	after, _, err := rollout.Record(ctx, js, id)
	if err != nil {
		t.Fatal(err)
	}
	if !after.PlannedAt.Equal(before.PlannedAt) || after.VMList != before.VMList || after.Planned != 20 {
		t.Errorf("record after the redelivery: planned %d at %v, list %q; want the first: planned %d at %v, list %q",
			after.Planned, after.PlannedAt, after.VMList, before.Planned, before.PlannedAt, before.VMList)
	}
	staged, err := rollout.CountSubjects(ctx, js, events.StreamStaged, events.StagedOf(id))
	if err != nil || staged != 19 {
		t.Errorf("%d plans staged (%v), want 19", staged, err)
	}
}

// redeliver publishes the last message on subject of the events stream
// again, under another Msg-Id, as JetStream redelivers it to the planner.
func redeliver(t *testing.T, js jetstream.JetStream, subject string) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	again := events.NewMsg(subject, m.Header.Get(jetstream.MsgIDHeader)+"/again", m.Header.Get(events.HeaderCEType), m.Data)
	if _, err := js.PublishMsg(ctx, again); err != nil {
		t.Fatal(err)
	}
}

// TestForgedPlansMoveNothing: a plan under a real event id moves a VM only
// if the rollout planned that VM in that batch. One for a VM the switch's
// selector left out, and one releasing a VM of a later batch early, are
// dead-lettered saying so, and neither VM is written.
func TestForgedPlansMoveNothing(t *testing.T) {
	_, js, w := start(t)
	ctx := context.Background()
	id, acct := canarySwitch(t, js)
	canary := acct.Latest["uid-vm-00"]
	from := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}
	switchTarget := events.Target{Move: events.MoveSwitch, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u2"}, From: &from}
	forge := func(vm events.VMRef) {
		t.Helper()
		plan := events.Plan{EventID: id, VM: vm, Action: events.ResultNextBoot, Target: switchTarget}
		planID := events.PlanID(id, vm.UID)
		body, err := events.Encode(events.TypePlan, planID, "kvlive/planner", vm.String(), time.Now(), &plan)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, events.NewMsg(events.PlanSubject(vm.Namespace, id), planID, events.TypePlan, body)); err != nil {
			t.Fatal(err)
		}
	}
	forge(events.VMRef{Namespace: "ns-0", Name: "vm-03", UID: "uid-vm-03"}) // parity 1: not selected
	forge(events.VMRef{Namespace: "ns-0", Name: "vm-06", UID: "uid-vm-06"}) // selected, in batch 2
	settled(t, js, events.StreamPlans, events.ConsumerApplier)

	for _, vm := range []string{"ns-0/vm-03", "ns-0/vm-06"} {
		if n := w.get(vm); n != 0 {
			t.Errorf("%s patched %d times by a forged plan", vm, n)
		}
	}
	reasons := deadReasons(t, js, id)
	for _, want := range []string{"did not plan VM ns-0/vm-03", "planned VM ns-0/vm-06 in batch 2, the plan says batch 1"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("dead letters %q, want one saying %q", reasons, want)
		}
	}
	if after, err := rollout.AccountOf(ctx, js, id); err != nil || len(after.Latest) != 1 || after.Latest["uid-vm-00"].Attempt != canary.Attempt {
		t.Errorf("outcomes after the forged plans: %v (%v), want the canary's alone", after.Latest, err)
	}
}

// deadReasons joins the reasons of eventID's dead letters.
func deadReasons(t *testing.T, js jetstream.JetStream, eventID string) string {
	t.Helper()
	s, err := js.Stream(context.Background(), events.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		if m, err := s.GetMsg(context.Background(), seq); err == nil {
			reasons = append(reasons, m.Header.Get(events.HeaderDeadReason))
		}
	}
	return strings.Join(reasons, "; ")
}

// total is how many JSON patches kvlive sent, to every VM.
func (w *writes) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.perVM {
		n += c
	}
	return n
}

// TestAPauseOutlastsTheReplayHorizon: a rollout paused for longer than the
// replay horizon (--max-age) resumes and moves every VM, and once it has
// settled its records age out with the horizon like any other's.
func TestAPauseOutlastsTheReplayHorizon(t *testing.T) {
	const horizon = 3 * time.Second
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.MaxAge, o.DuplicateWindow = horizon, time.Second })
	clients, js, w := startOn(t, js, func(cfg *pipeline.Config, _ jetstream.JetStream) { cfg.Horizon = horizon })
	ctx := context.Background()
	eventID := pauseAhead(t, clients, js)
	time.Sleep(3 * horizon) // the pause outlasts the horizon
	steer(t, js, eventID, events.ActionResume, "")
	p := follow(t, js, eventID)
	for i := range fleetSize {
		name, ns := fmt.Sprintf("vm-%02d", i), fmt.Sprintf("ns-%d", i%3)
		if o := p.Outcomes["uid-"+name]; !o.Wrote {
			t.Errorf("%s: outcome %+v after a pause past the horizon, want it moved", name, o)
		}
		if n := w.get(ns + "/" + name); n != 1 {
			t.Errorf("%s patched %d times, want once", name, n)
		}
	}
	testenv.Eventually(t, time.Minute, "the rollout complete", func() bool {
		a, err := rollout.AccountOf(ctx, js, eventID)
		return err == nil && a.Phase == rollout.PhaseComplete
	})
	testenv.Eventually(t, time.Minute, "the settled rollout's records to age out", func() bool {
		_, err := rollout.AccountOf(ctx, js, eventID)
		return errors.Is(err, rollout.ErrNoRollout) &&
			countOf(t, js, events.StreamOutcomes, events.OutcomesOf(eventID, "")) == 0 &&
			countOf(t, js, events.StreamEvents, events.ChangedSubject(events.KindClusterInstancetype)) == 0
	})
}

// countOf is how many messages stream holds under filter.
func countOf(t *testing.T, js jetstream.JetStream, stream, filter string) int {
	t.Helper()
	n, err := rollout.CountSubjects(context.Background(), js, stream, filter)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// settledEdit edits u1, waits until its rollout is complete, and has a
// keeper mark it settled, as a sweep a period later does; it returns the
// event id once every control watch (the applier's too) sees the mark.
func settledEdit(t *testing.T, clients kube.Clients, js jetstream.JetStream) string {
	t.Helper()
	ctx := context.Background()
	eventID := edit(t, clients)
	follow(t, js, eventID)
	testenv.Eventually(t, time.Minute, "the rollout complete", func() bool {
		a, err := rollout.AccountOf(ctx, js, eventID)
		return err == nil && a.Phase == rollout.PhaseComplete
	})
	k := &rollout.Keeper{JS: js, Now: func() time.Time { return time.Now().Add(2 * rollout.KeepEvery(0)) }}
	store, err := rollout.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watch, err := store.StartWatch(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sw, err := k.Sweep(ctx); err != nil || sw.Settled != 1 {
		t.Fatalf("sweep: %+v %v, want the rollout marked settled", sw, err)
	}
	testenv.Eventually(t, time.Minute, "the mark in a control watch", func() bool { return !watch.Of(eventID).Settled.IsZero() })
	// The sweep's clock ran ahead; a real keeper marks a rollout only once
	// it has been quiet this long, which the appliers' reads of the
	// control record (each answering for a moment) see.
	time.Sleep(rollout.MinQuiet)
	return eventID
}

// TestAPlanAfterTheRolloutSettledMovesNothing: once a rollout has settled,
// a plan under its id for a VM it moved (published by whoever can reach
// the plans subjects) is dead-lettered and writes nothing, even where the
// VM has been set back since; `kvlive dlq retry` of that plan reopens the
// rollout and moves the VM, as the operator asked.
func TestAPlanAfterTheRolloutSettledMovesNothing(t *testing.T) {
	clients, js, w := start(t)
	ctx := context.Background()
	vms := clients.Virt.KubevirtV1().VirtualMachines("ns-0")
	before, err := vms.Get(ctx, "vm-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventID := settledEdit(t, clients, js)
	// Someone sets vm-00's pin back, then forges its plan again.
	vm, _ := vms.Get(ctx, "vm-00", metav1.GetOptions{})
	vm.Status.InstancetypeRef = before.Status.InstancetypeRef
	if _, err := vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	plan := events.Plan{EventID: eventID, VM: events.VMRef{Namespace: "ns-0", Name: "vm-00", UID: "uid-vm-00"}, Action: events.ResultLive,
		Target: events.Target{Move: events.MoveRepin, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}, UID: "uid-u1", Generation: 2}}
	id := events.PlanID(eventID, "uid-vm-00") + "/forged"
	body, err := events.Encode(events.TypePlan, id, "forger", "", time.Now(), &plan)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, events.NewMsg(events.PlanSubject("ns-0", eventID), id, events.TypePlan, body)); err != nil {
		t.Fatal(err)
	}
	dlq := inspect.Store{JetStream: js}
	var dead []inspect.Letter
	testenv.Eventually(t, time.Minute, "the forged plan dead-lettered, or vm-00 written again", func() bool {
		dead, _ = dlq.List(ctx)
		return len(dead) > 0 || w.get("ns-0/vm-00") > 1
	})
	if n := w.get("ns-0/vm-00"); n != 1 || len(dead) != 1 || !strings.Contains(dead[0].Reason, "settled") {
		t.Fatalf("vm-00 patched %d times, dead letters %+v; want it patched once (by the rollout) and the plan dead-lettered as after the rollout settled", n, dead)
	}
	if err := dlq.Retry(ctx, dead[0].Seq); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "vm-00 moved by the retried plan", func() bool {
		if dead, _ := dlq.List(ctx); len(dead) > 0 {
			t.Fatalf("the retried plan dead-lettered again: %s", dead[0].Reason)
		}
		return w.get("ns-0/vm-00") == 2
	})
}

// TestARedeliveredEventOfASettledRolloutPublishesNothing: an event stored
// again after its rollout settled (a publish retried past the duplicate
// window, a lost ack) publishes no plan: none would move a VM, and each
// would be a dead letter. The duplicate window is short, so the plans
// would not be recognised as sent before.
func TestARedeliveredEventOfASettledRolloutPublishesNothing(t *testing.T) {
	const window = time.Second
	clients, js, w := startOn(t, testenv.JetStream(t, func(o *events.StreamOptions) { o.DuplicateWindow = window }))
	ctx := context.Background()
	eventID := settledEdit(t, clients, js)
	time.Sleep(2 * window) // past the window: the plans would be stored again
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := s.GetLastMsgForSubject(ctx, events.ChangedSubject(events.KindClusterInstancetype))
	if err != nil || orig.Header.Get(jetstream.MsgIDHeader) != eventID {
		t.Fatalf("the event: %v %v", orig, err)
	}
	m := nats.NewMsg(orig.Subject)
	m.Header, m.Data = orig.Header, orig.Data
	m.Header.Set(jetstream.MsgIDHeader, eventID+"/again")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	settled(t, js, events.StreamEvents, events.ConsumerPlanner)
	settled(t, js, events.StreamPlans, events.ConsumerApplier)
	if dead, err := (inspect.Store{JetStream: js}).List(ctx); err != nil || len(dead) != 0 {
		t.Errorf("%d dead letters (%v), want none", len(dead), err)
	}
	for i := range fleetSize {
		if n := w.get(fmt.Sprintf("ns-%d/vm-%02d", i%3, i)); n != 1 {
			t.Errorf("vm-%02d patched %d times, want once", i, n)
		}
	}
}
