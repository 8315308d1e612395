package control_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/control"
	"kvlive/internal/testutil"
)

func TestApplyIsCompareAndSet(t *testing.T) {
	ctx := context.Background()
	js := testutil.JetStream(t)
	s, err := control.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// Eight operators pause an event that has not happened yet, at once:
	// exactly one of them changes it; the others find it paused.
	var wg sync.WaitGroup
	var mu sync.Mutex
	changes := 0
	for range 8 {
		wg.Go(func() {
			_, changed, err := s.Apply(ctx, "E/uid/2", events.ActionPause, "", "test", time.Now())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if changed {
				changes++
			}
		})
	}
	wg.Wait()
	if changes != 1 {
		t.Fatalf("%d pauses changed the record, want exactly 1", changes)
	}
	if _, _, err := s.Apply(ctx, "E/uid/2", events.ActionAbort, "", "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	c, rev, err := s.Get(ctx, "E/uid/2")
	if err != nil || c.State != events.StateAborted || rev == 0 {
		t.Fatalf("got %+v at %d, %v; want aborted", c, rev, err)
	}
	if _, _, err := s.Apply(ctx, "E/uid/2", events.ActionResume, "", "test", time.Now()); err == nil {
		t.Error("resumed an aborted rollout")
	}
}

func TestWatchFollowsChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := testutil.JetStream(t)
	s, err := control.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctx, "before", events.ActionPause, "r", "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	seen := make(chan control.State, 4)
	w, err := s.StartWatch(ctx, func(id string, st control.State) {
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
		if _, _, err := s.Apply(ctx, "after", step.action, "", "test", time.Now()); err != nil {
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
