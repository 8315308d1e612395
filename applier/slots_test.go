package applier

import (
	"context"
	"testing"
	"time"
)

// TestRolloutSlots: n VMs of a rollout at once, the next waits for a slot
// (or gives up with its context); other rollouts are not held; nothing is
// kept once a rollout's slots are all back.
func TestRolloutSlots(t *testing.T) {
	r := newRolloutSlots()
	ctx := context.Background()
	first, err := r.take(ctx, "E", 2)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := r.take(ctx, "E", 2)
	if other, err := r.take(ctx, "F", 1); err != nil {
		t.Fatalf("another rollout waited: %v", err)
	} else {
		other()
	}
	got := make(chan func(), 1)
	go func() {
		third, err := r.take(ctx, "E", 2)
		if err == nil {
			got <- third
		}
	}()
	select {
	case <-got:
		t.Fatal("a third VM of a rollout capped at 2 went ahead")
	case <-time.After(50 * time.Millisecond):
	}
	first()
	third := <-got
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := r.take(short, "E", 2); err == nil {
		t.Error("a wait past its context succeeded")
	}
	second()
	third()
	if len(r.sems) != 0 {
		t.Errorf("slots kept after every VM finished: %v", r.sems)
	}
	if release, err := r.take(ctx, "G", 0); err != nil {
		t.Error(err)
	} else {
		release()
	}
}
