package rollout

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// TestSteerRefusesWhatItCannotMeanToChange: steering an event kvlive does
// not know is an error unless ahead of it, with an id an event can have;
// pausing or aborting a finished rollout is refused unless forced; a known
// event is paused.
func TestSteerRefusesWhatItCannotMeanToChange(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	now := time.Now()
	steer := func(s Steering) (Steered, error) {
		s.By = "alice"
		return Steer(ctx, js, s, now)
	}
	if _, err := steer(Steering{EventID: "typo", Action: events.ActionPause}); !errors.Is(err, ErrNoRollout) || !strings.Contains(err.Error(), "say --ahead") {
		t.Errorf("pause of an unknown event: %v", err)
	}
	if _, err := steer(Steering{EventID: "typo", Action: events.ActionPause, Ahead: true}); !errors.Is(err, ErrBadEventID) || !strings.HasPrefix(err.Error(), "pause --ahead: ") {
		t.Errorf("pause --ahead of an id no event has: %v", err)
	}
	if _, err := steer(Steering{EventID: events.EventID(events.KindClusterInstancetype, "not-a-uid", 7), Action: events.ActionPause, Ahead: true}); !errors.Is(err, ErrBadEventID) ||
		!strings.Contains(err.Error(), `"not-a-uid" is not an object UID`) {
		t.Errorf("pause --ahead of an object UID no object can have: %v", err)
	}
	ahead := events.EventID(events.KindClusterInstancetype, "3f0c2e7a-9d1b-4c5e-8a6f-2b7d9e1c4a50", 9)
	if s, err := steer(Steering{EventID: ahead, Action: events.ActionPause, Ahead: true}); err != nil || !s.Changed || s.Control.State != events.StatePaused {
		t.Errorf("pause --ahead: %+v %v", s, err)
	}
	if err := Known(ctx, js, ahead); err != nil {
		t.Errorf("an event paused ahead is known: %v", err)
	}

	recordRollout(t, js, 1) // acctEvent, planned: 1 VM
	publishOutcome(t, js, "a", 1, events.ResultLive)
	if _, err := steer(Steering{EventID: acctEvent, Action: events.ActionAbort}); err == nil || !strings.Contains(err.Error(), "is complete: it moves no VM any more") {
		t.Errorf("abort of a complete rollout: %v", err)
	}
	// A prefix of a recorded id stands for the id.
	if s, err := steer(Steering{EventID: acctEvent[:20], Action: events.ActionAbort, Force: true}); err != nil || !s.Changed ||
		s.Control.State != events.StateAborted || s.EventID != acctEvent {
		t.Errorf("abort --force of a complete rollout by a prefix of its id: %+v %v", s, err)
	}
}

// TestPromoteNext: only a batched rollout kvlive knows is promoted, by its
// id or a prefix of it, one batch at a time up to the last.
func TestPromoteNext(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := PromoteNext(ctx, js, "typo", 0, "alice", now); !errors.Is(err, ErrNoRollout) {
		t.Errorf("promote of an unknown event: %v", err)
	}
	recordRollout(t, js, 3) // acctEvent, one batch
	if _, err := PromoteNext(ctx, js, acctEvent, 0, "alice", now); err == nil || !strings.Contains(err.Error(), "not a batched rollout") {
		t.Errorf("promote of a rollout in one batch: %v", err)
	}
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: acctEvent, Planned: 3, PlannedAt: now, Batches: []int{1, 2}})
	if _, err := kv.Put(ctx, events.RolloutKey(acctEvent), rec); err != nil {
		t.Fatal(err)
	}
	p, err := PromoteNext(ctx, js, acctEvent[:20], 0, "alice", now)
	if err != nil || p.EventID != acctEvent || p.Batch != 1 || len(p.Batches) != 2 {
		t.Fatalf("promote by a prefix: %+v %v, want batch 2 of 2 of %s", p, err, acctEvent)
	}
	if _, err := PromoteNext(ctx, js, acctEvent, 0, "alice", now); !errors.Is(err, ErrNothingToPromote) {
		t.Errorf("promote past the last batch: %v", err)
	}
}

// TestPromotesOneAfterAnotherReleaseOneBatch: twenty operators run
// `rollout promote` at once, each reading the record itself, so some read
// it after another's promote landed: batch 2 is released once, and every
// other promote is told it was released meanwhile (issue 59, item 7: 15
// VMs moved where 10 were due). Naming batch 3 releases it; naming it
// again is refused.
func TestPromotesOneAfterAnotherReleaseOneBatch(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	now := time.Now()
	recordRollout(t, js, 3)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: acctEvent, Planned: 3, PlannedAt: now, Batches: []int{1, 1, 1}})
	if _, err := kv.Put(ctx, events.RolloutKey(acctEvent), rec); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var released, meanwhile atomic.Int32
	for i := range 20 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // some read after the first promote landed
			p, err := PromoteNext(ctx, js, acctEvent, 0, "op", now)
			switch {
			case err == nil && p.Batch == 1:
				released.Add(1)
			case errors.Is(err, ErrPromotedMeanwhile):
				meanwhile.Add(1)
			default:
				t.Errorf("PromoteNext = %+v, %v", p, err)
			}
		})
	}
	wg.Wait()
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := s.Get(ctx, acctEvent)
	if released.Load() != 1 || meanwhile.Load() != 19 || c.Batch != 1 {
		t.Fatalf("20 promotes: %d released, %d told meanwhile; the record is at batch %d, want 2 released once", released.Load(), meanwhile.Load(), c.Batch+1)
	}
	if p, err := PromoteNext(ctx, js, acctEvent, 3, "op", now); err != nil || p.Batch != 2 {
		t.Errorf("promote --batch 3: %+v, %v", p, err)
	}
	if _, err := PromoteNext(ctx, js, acctEvent, 3, "op", now); !errors.Is(err, ErrNothingToPromote) {
		t.Errorf("promote --batch 3 again: %v, want nothing to promote", err)
	}
	if _, err := PromoteNext(ctx, js, acctEvent, 1, "op", now); err == nil || !strings.Contains(err.Error(), "batch 1 goes first") {
		t.Errorf("promote --batch 1: %v", err)
	}
}
