package rollout

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// TestFollowReadsNoAccountWhileAPlanIsLeft: lulls in a rollout's outcomes
// while one of its plans is in flight (or held) read no account, which
// would read every outcome so far again (at 100,000 VMs a follow's lulls
// read the outcomes some thirteen times over); once no plan is left, a
// lull reads it, and the rollout found incomplete ends the follow.
func TestFollowReadsNoAccountWhileAPlanIsLeft(t *testing.T) {
	js := keepFixture(t)
	var reads atomic.Int32 // the account's reads of the outcomes
	counted := func(what string) {
		if what == "outcomes" {
			reads.Add(1)
		}
	}
	staged := planMsg(t, events.StagedSubject(1, "running"), "running-c")
	if _, err := js.PublishMsg(t.Context(), staged); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"running", "paused"} { // plans in flight and staged, a plan held
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second) // some eight lulls
		p, err := follow(ctx, js, id, nil, counted)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || len(p.Outcomes) != 1 {
			t.Fatalf("%s: %d outcomes, %v; want its one, followed until the deadline", id, len(p.Outcomes), err)
		}
		if n := reads.Load(); n != 0 {
			t.Errorf("%s: %d account reads while a plan of it was left, want none", id, n)
		}
	}
	s, err := js.Stream(t.Context(), events.StreamPlans)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(t.Context(), jetstream.WithPurgeSubject(events.PlanSubject("ns", "running"))); err != nil {
		t.Fatal(err)
	}
	// Its staged plan alone is left: still no account read.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	if _, err := follow(ctx, js, "running", nil, counted); !errors.Is(err, context.DeadlineExceeded) || reads.Load() != 0 {
		t.Fatalf("with a staged plan left: %v, %d account reads; want the deadline and none", err, reads.Load())
	}
	cancel()
	if s, err = js.Stream(t.Context(), events.StreamStaged); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(t.Context(), jetstream.WithPurgeSubject(staged.Subject)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second) // a bound; the follow ends at its next lull
	defer cancel()
	p, err := follow(ctx, js, "running", nil, counted)
	if err != nil || p.Account == nil || p.Account.Phase != PhaseIncomplete || reads.Load() == 0 {
		t.Fatalf("with no plan left: %+v, %v, %d account reads; want the rollout read and found incomplete", p.Account, err, reads.Load())
	}
}
