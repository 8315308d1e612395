package rollout

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// TestConcurrentDrainsAllFinish: replicas releasing one event's held plans
// at once share one durable consumer; the first to finish deletes it. Every
// drain still returns, in time, and every plan is released exactly once.
func TestConcurrentDrainsAllFinish(t *testing.T) {
	ctx := t.Context()
	js := testenv.JetStream(t)
	rc, err := NewController(ControllerConfig{Fleet: gateFleet{}, JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	store, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if rc.watch, err = store.StartWatch(ctx, nil); err != nil {
		t.Fatal(err)
	}
	plan := events.Plan{EventID: "VirtualMachineClusterInstancetype/uid-u1/2", Action: events.ResultNextBoot,
		Target: events.Target{Move: events.MoveRepin, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"},
			UID: "uid-u1", Generation: 2, Pin: events.PinStatus, FromRevision: "a-u1-v1beta1-uid-u1-1"}}
	const plans, drains = 40, 20
	for i := range plans {
		p := plan
		p.VM = events.VMRef{Namespace: "ns", Name: fmt.Sprint("vm-", i), UID: fmt.Sprint("uid-", i)}
		id := events.PlanID(p.EventID, p.VM.UID)
		body, err := events.Encode(events.TypePlan, id, "kvlive/planner", p.VM.String(), time.Now(), &p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, events.NewMsg(events.HeldSubject("ns", p.EventID), id, events.TypePlan, body)); err != nil {
			t.Fatal(err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	errs := make([]error, drains)
	var wg sync.WaitGroup
	for i := range drains {
		wg.Go(func() { errs[i] = rc.releaseEvent(dctx, plan.EventID) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("drain %d: %v", i, err)
		}
	}
	released, err := CountSubjects(ctx, js, events.StreamPlans, events.PlansOf(plan.EventID))
	if err != nil || released != plans {
		t.Errorf("%d plans released (%v), want %d", released, err, plans)
	}
	if held, err := CountSubjects(ctx, js, events.StreamHeld, events.HeldOf(plan.EventID)); err != nil || held != 0 {
		t.Errorf("%d plans still held (%v)", held, err)
	}
	if _, err := js.Consumer(ctx, events.StreamHeld, events.ReleaseConsumer(plan.EventID).Durable); err != jetstream.ErrConsumerNotFound {
		t.Errorf("the release consumer is left behind (%v)", err)
	}
}
