package applier

import (
	"sync/atomic"
	"time"
)

// activityLinger is how long after its last plan an applier still counts
// as moving VMs: between two fetches a busy rollout holds no plan for a
// moment.
const activityLinger = 2 * time.Second

// Activity tells whether an applier is moving VMs: a plan in hand, or one
// finished less than two seconds ago. The revision pruner waits while it
// is (pruner.Config.Busy), so its reads and deletes do not take the API
// server's capacity from a rollout. The zero value is idle; a nil
// Activity records nothing.
type Activity struct {
	inHand atomic.Int64
	// last is when the last plan was let go, in Unix nanoseconds.
	last atomic.Int64
}

func (a *Activity) begin() {
	if a != nil {
		a.inHand.Add(1)
	}
}

func (a *Activity) end(now time.Time) {
	if a != nil {
		a.last.Store(now.UnixNano())
		a.inHand.Add(-1)
	}
}

// Busy reports whether the applier holds a plan at now, or let one go
// less than two seconds before.
func (a *Activity) Busy(now time.Time) bool {
	if a == nil {
		return false
	}
	return a.inHand.Load() > 0 || now.Sub(time.Unix(0, a.last.Load())) < activityLinger
}
