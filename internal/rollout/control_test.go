package rollout

import (
	"context"
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

// TestSteeredRecordsExpireWithTheHorizon: the control bucket does not grow
// with every rollout ever steered. A resumed or aborted rollout's record
// expires with the replay horizon; a paused one stays until someone acts.
func TestSteeredRecordsExpireWithTheHorizon(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.MaxAge, o.DuplicateWindow = 2*time.Second, time.Second })
	ctx := context.Background()
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		id     string
		action events.ControlAction
	}{{"paused", events.ActionPause}, {"aborted", events.ActionAbort}, {"resumed", events.ActionPause}, {"resumed", events.ActionResume}} {
		if _, _, err := s.Apply(ctx, step.id, step.action, "", "test", time.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the aborted and resumed records to expire", func() bool {
		_, abortedRev, _ := s.Get(ctx, "aborted")
		_, resumedRev, _ := s.Get(ctx, "resumed")
		return abortedRev == 0 && resumedRev == 0
	})
	if c, rev, err := s.Get(ctx, "paused"); err != nil || rev == 0 || c.State != events.StatePaused {
		t.Errorf("the paused record: %+v rev %d %v; want it kept", c, rev, err)
	}
}
