package rollout

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/testenv"
)

func TestApplyIsCompareAndSet(t *testing.T) {
	ctx := context.Background()
	js := testenv.JetStream(t)
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// race has eight operators ask for action at once and counts how many
	// changed the record.
	race := func(action events.ControlAction) int {
		var wg sync.WaitGroup
		var changes atomic.Int32
		for range 8 {
			wg.Go(func() {
				_, changed, err := s.Apply(ctx, "E/uid/2", action, "", "test", time.Now(), false)
				if err != nil {
					t.Error(err)
				}
				if changed {
					changes.Add(1)
				}
			})
		}
		wg.Wait()
		return int(changes.Load())
	}
	// Pausing an event that has not happened yet creates the record;
	// aborting then updates it at its revision. Either way exactly one
	// operator gets through and the others find the rollout already there.
	if n := race(events.ActionPause); n != 1 {
		t.Fatalf("%d pauses changed the record, want exactly 1", n)
	}
	if n := race(events.ActionAbort); n != 1 {
		t.Fatalf("%d aborts changed the record, want exactly 1", n)
	}
	c, rev, err := s.Get(ctx, "E/uid/2")
	if err != nil || c.State != events.StateAborted || rev == 0 {
		t.Fatalf("got %+v at %d, %v; want aborted", c, rev, err)
	}
	if _, _, err := s.Apply(ctx, "E/uid/2", events.ActionResume, "", "test", time.Now(), false); err == nil {
		t.Error("resumed an aborted rollout")
	}
}

func TestWatchFollowsChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := testenv.JetStream(t)
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctx, "before", events.ActionPause, "r", "test", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	seen := make(chan State, 4)
	w, err := s.StartWatch(ctx, func(id string, st State) {
		if id == "after" {
			seen <- st
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := w.Of("before"); st.State != events.StatePaused || st.Reason != "r" {
		t.Errorf("initial record: %+v", st)
	}
	if st := w.Of("unknown"); st.State != events.StateRunning {
		t.Errorf("unknown event: %+v, want running", st)
	}
	// One change at a time: a KV watch promises the latest value, not
	// every value in between.
	for _, step := range []struct {
		action events.ControlAction
		want   events.RolloutState
	}{{events.ActionPause, events.StatePaused}, {events.ActionResume, events.StateRunning}} {
		if _, _, err := s.Apply(ctx, "after", step.action, "", "test", time.Now(), false); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(30 * time.Second)
		for got := false; !got; {
			select {
			case st := <-seen:
				got = st.State == step.want
			case <-deadline:
				t.Fatalf("no callback with %s after %s", step.want, step.action)
			}
		}
	}
	if st := w.Of("after"); st.State != events.StateRunning {
		t.Errorf("after resume: %+v", st)
	}
}

// TestBatchStepsAreCompareAndSet: of replicas releasing the same batch at
// once one wins; a gate passes once per batch; pause and resume keep the
// batch; promote releases the next batch and resumes, up to the last.
func TestBatchStepsAreCompareAndSet(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	const id = "E/uid/3"
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	var opened atomic.Int32
	for range 8 {
		wg.Go(func() {
			ok, err := s.OpenBatch(ctx, id, 1, now)
			if err != nil {
				t.Error(err)
			}
			if ok {
				opened.Add(1)
			}
		})
	}
	wg.Wait()
	if opened.Load() != 1 {
		t.Fatalf("%d replicas released batch 2, want exactly 1", opened.Load())
	}
	if ok, _ := s.OpenBatch(ctx, id, 1, now); ok {
		t.Error("batch 2 released twice")
	}
	if ok, err := s.PassGate(ctx, id, 1, "all 3 VMs in their planned state", now); !ok || err != nil {
		t.Fatalf("PassGate = %v, %v", ok, err)
	}
	if ok, _ := s.PassGate(ctx, id, 1, "again", now); ok {
		t.Error("a gate passed twice")
	}
	if _, _, err := s.Apply(ctx, id, events.ActionPause, "look first", "alice", now, false); err != nil {
		t.Fatal(err)
	}
	c, _, _ := s.Get(ctx, id)
	if c.State != events.StatePaused || c.Batch != 1 || c.GateAt.IsZero() || c.Gate != "all 3 VMs in their planned state" {
		t.Fatalf("a pause lost the batch: %+v", c)
	}
	batch, err := s.Promote(ctx, id, 1, 2, false, "bob", now.Add(time.Minute))
	if err != nil || batch != 2 {
		t.Fatalf("Promote = %d, %v", batch, err)
	}
	c, _, _ = s.Get(ctx, id)
	if c.State != events.StateRunning || c.Batch != 2 || !c.GateAt.IsZero() || c.By != "bob" {
		t.Errorf("after promote: %+v", c)
	}
	if _, err := s.Promote(ctx, id, 2, 2, false, "bob", now); !errors.Is(err, ErrNothingToPromote) {
		t.Errorf("promote past the last batch: %v", err)
	}
}

// TestConcurrentPromotesReleaseOneBatch: operators who all saw batch 1
// released and promote at once release batch 2, once; the others are told
// it was released meanwhile, and batch 3 stays staged.
func TestConcurrentPromotesReleaseOneBatch(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	const id = "E/uid/4"
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if ok, err := s.OpenBatch(ctx, id, 0, now); err != nil || ok {
		t.Fatalf("OpenBatch 0 = %v, %v", ok, err) // batch 0 is released from the start
	}
	var wg sync.WaitGroup
	var released, meanwhile atomic.Int32
	for range 20 {
		wg.Go(func() {
			batch, err := s.Promote(ctx, id, 0, 3, false, "op", now)
			switch {
			case err == nil && batch == 1:
				released.Add(1)
			case errors.Is(err, ErrPromotedMeanwhile):
				meanwhile.Add(1)
			default:
				t.Errorf("Promote = %d, %v", batch, err)
			}
		})
	}
	wg.Wait()
	c, _, _ := s.Get(ctx, id)
	if released.Load() != 1 || meanwhile.Load() != 19 || c.Batch != 1 {
		t.Fatalf("20 promotes of batch 1: %d released, %d told meanwhile; the record is at batch %d, want 1",
			released.Load(), meanwhile.Load(), c.Batch+1)
	}
}

// TestARetryClaimsItsVMsOnce: a retry claims the failed VMs on the
// rollout's control record; another retry of any of them is refused until
// the first is released (its event could not be published).
func TestARetryClaimsItsVMsOnce(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	const id = "switch/0b7f3c6e-3b6a-4f0c-9a57-7d2c8f1f3c11"
	now := time.Now()
	if err := s.ClaimRetry(ctx, id, "retry/1", []string{"a", "b"}, "alice", now); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimRetry(ctx, id, "retry/2", []string{"b", "c"}, "bob", now); !errors.Is(err, ErrRetried) || !strings.Contains(err.Error(), "retry/1") {
		t.Errorf("a second retry of b: %v, want ErrRetried naming retry/1", err)
	}
	if err := s.ReleaseRetry(ctx, id, "retry/1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimRetry(ctx, id, "retry/2", []string{"b", "c"}, "bob", now); err != nil {
		t.Errorf("a retry after the first was released: %v", err)
	}
	c, _, err := s.Get(ctx, id)
	if err != nil || c.RetriedBy("b") != "retry/2" || c.RetriedBy("a") != "" || c.State != events.StateRunning {
		t.Errorf("control record %+v (%v): want b retried by retry/2 alone, the rollout running", c, err)
	}
}

// TestTheRecordKeepsEveryPause: each pause, however it came (an operator,
// a gate's confirm, a restart window), is kept in the control record after
// it is lifted; asking twice is one pause; the record keeps the latest
// events.MaxPauses.
func TestTheRecordKeepsEveryPause(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, testenv.JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	must := func(_ any, _ bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.AwaitConfirm(ctx, "E/1", "the confirm webhook is asked", at(0))
	must(nil, false, err)
	_, err = s.ConfirmAnswered(ctx, "E/1", c, false, false, "the webhook said no", at(1))
	must(nil, false, err)
	must(s.Apply(ctx, "E/1", events.ActionResume, "", "alice", at(2), false))
	must(s.Apply(ctx, "E/1", events.ActionPause, "lunch", "bob", at(3), false))
	must(s.Apply(ctx, "E/1", events.ActionPause, "again", "bob", at(4), false)) // paused already
	must(s.Apply(ctx, "E/1", events.ActionResume, "", "bob", at(5), false))
	_, err = s.PauseUntil(ctx, "E/1", "outside its restart window", at(6), at(60))
	must(nil, false, err)
	c, _, err = s.Get(ctx, "E/1")
	if err != nil {
		t.Fatal(err)
	}
	want := []events.Pause{
		{At: at(0), By: GatedBy, Reason: "the confirm webhook is asked"},
		{At: at(1), By: GatedBy, Reason: "the webhook said no"},
		{At: at(3), By: "bob", Reason: "lunch"},
		{At: at(6), By: WindowBy, Reason: "outside its restart window"},
	}
	if len(c.Pauses) != len(want) {
		t.Fatalf("pauses %+v, want %+v", c.Pauses, want)
	}
	for i := range want {
		if p := c.Pauses[i]; !p.At.Equal(want[i].At) || p.By != want[i].By || p.Reason != want[i].Reason {
			t.Errorf("pause %d: %+v, want %+v", i, p, want[i])
		}
	}

	for i := range events.MaxPauses + 3 {
		must(s.Apply(ctx, "E/2", events.ActionPause, "", "bob", at(2*i), false))
		must(s.Apply(ctx, "E/2", events.ActionResume, "", "bob", at(2*i+1), false))
	}
	c, _, _ = s.Get(ctx, "E/2")
	if n := len(c.Pauses); n != events.MaxPauses || !c.Pauses[n-1].At.Equal(at(2*(events.MaxPauses+2))) || !c.Pauses[0].At.Equal(at(6)) {
		t.Errorf("%d pauses, from %v to %v; want the latest %d", n, c.Pauses[0].At, c.Pauses[n-1].At, events.MaxPauses)
	}
}
