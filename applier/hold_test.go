package applier

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/rollout"
)

// TestConcurrentDrainsAllFinish: replicas releasing one event's held plans
// at once share one durable consumer; the first to finish deletes it. Every
// drain still returns, in time, and every plan is released exactly once.
func TestConcurrentDrainsAllFinish(t *testing.T) {
	a, _, plan := fixture(t)
	ctx := t.Context()
	js := a.cfg.JetStream
	store, err := rollout.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if a.watch, err = store.StartWatch(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if a.held, err = js.Stream(ctx, events.StreamHeld); err != nil {
		t.Fatal(err)
	}
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
		wg.Go(func() { errs[i] = a.releaseEvent(dctx, plan.EventID) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("drain %d: %v", i, err)
		}
	}
	released, err := rollout.CountSubjects(ctx, js, events.StreamPlans, events.PlansOf(plan.EventID))
	if err != nil || released != plans {
		t.Errorf("%d plans released (%v), want %d", released, err, plans)
	}
	if held, err := rollout.CountSubjects(ctx, js, events.StreamHeld, events.HeldOf(plan.EventID)); err != nil || held != 0 {
		t.Errorf("%d plans still held (%v)", held, err)
	}
	if _, err := js.Consumer(ctx, events.StreamHeld, events.ReleaseConsumer(plan.EventID).Durable); err != jetstream.ErrConsumerNotFound {
		t.Errorf("the release consumer is left behind (%v)", err)
	}
}

// TestKnownRolloutsAreBoundedByTheirVMs: the planned-VM lists the applier
// keeps in memory are bounded; past the bound the least recently used
// rollouts are let go, and read again when a plan of theirs comes.
func TestKnownRolloutsAreBoundedByTheirVMs(t *testing.T) {
	a, _, _ := fixture(t)
	ctx := t.Context()
	a.knownVMsCap = 25
	ids := []string{"switch/00000000-0000-4000-8000-000000000001", "switch/00000000-0000-4000-8000-000000000002", "switch/00000000-0000-4000-8000-000000000003"}
	for _, id := range ids {
		vms := make([]events.PlannedVM, 10)
		for i := range vms {
			vms[i] = events.PlannedVM{VMRef: events.VMRef{Namespace: "ns", Name: fmt.Sprint("vm-", i), UID: fmt.Sprint(id, "-", i)}}
		}
		if _, _, err := rollout.Create(ctx, a.cfg.JetStream, events.Rollout{EventID: id, Planned: len(vms), PlannedAt: time.Now()}, vms); err != nil {
			t.Fatal(err)
		}
		if _, err := a.knownRollout(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.knownVMs.Load(); n != 20 || a.known.Len() != 2 {
		t.Errorf("%d VMs of %d rollouts kept, want 20 of 2", n, a.known.Len())
	}
	if _, kept := a.known.Get(ids[0]); kept {
		t.Error("the least recently used rollout was kept")
	}
	if r, err := a.knownRollout(ctx, ids[0]); err != nil || len(r.batchOf) != 10 {
		t.Errorf("read again: %d VMs (%v)", len(r.batchOf), err)
	}
}
