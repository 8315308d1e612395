package applier

import (
	"context"
	"sync"
)

// rolloutSlots caps how many VMs of each rollout this applier moves at
// once (a policy's maxInFlight): a worker takes one of the rollout's slots
// before carrying a plan out, waiting while all are taken.
type rolloutSlots struct {
	mu   sync.Mutex
	sems map[string]*slotSet
}

type slotSet struct {
	ch    chan struct{}
	users int
}

func newRolloutSlots() *rolloutSlots { return &rolloutSlots{sems: map[string]*slotSet{}} }

// take waits for one of eventID's n slots (n <= 0: no cap) until ctx ends,
// and returns what gives it back.
func (r *rolloutSlots) take(ctx context.Context, eventID string, n int) (release func(), err error) {
	if n <= 0 {
		return func() {}, nil
	}
	r.mu.Lock()
	s, ok := r.sems[eventID]
	if !ok {
		s = &slotSet{ch: make(chan struct{}, n)}
		r.sems[eventID] = s
	}
	s.users++
	r.mu.Unlock()
	done := func() {
		r.mu.Lock()
		if s.users--; s.users == 0 {
			delete(r.sems, eventID)
		}
		r.mu.Unlock()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
