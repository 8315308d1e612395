package rollout

import (
	"math"
	"strings"
	"time"

	"kvlive/events"
)

// A rollout policy's arithmetic: how a rollout of n VMs splits into
// batches, how many failures it tolerates, how long it waits between
// batches and for each, what a failure does. The policy itself, its fields
// and their syntax, is on the wire (events.Policy).

// of resolves a against total, percents rounded up (a batch) or down (a
// threshold).
func of(a events.Amount, total int, up bool) int {
	if !a.Percent {
		return a.N
	}
	f := float64(total) * float64(a.N) / 100
	if up {
		return int(math.Ceil(f))
	}
	return int(math.Floor(f))
}

// Batches splits n VMs into batch sizes, in order: the canary first (when
// set), then batches of BatchSize, the last one the rest. Every batch has
// at least one VM; n = 0 is no batch.
func Batches(p events.Policy, n int) []int {
	if n <= 0 {
		return nil
	}
	var sizes []int
	left := n
	if c, err := events.ParseAmount(p.Canary, true); err == nil && p.Canary != "" {
		first := min(max(of(c, n, true), 1), left)
		sizes, left = append(sizes, first), left-first
	}
	size := left
	if b, err := events.ParseAmount(p.BatchSize, true); err == nil && p.BatchSize != "" {
		size = max(of(b, n, true), 1)
	}
	for left > 0 {
		take := min(size, left)
		sizes, left = append(sizes, take), left-take
	}
	return sizes
}

// Batched reports whether p splits a rollout of n VMs into batches that
// are released one after another.
func Batched(p events.Policy, n int) bool { return len(Batches(p, n)) > 1 }

// Tolerated is how many failed VMs a rollout of n VMs tolerates.
func Tolerated(p events.Policy, n int) int {
	a, err := events.ParseAmount(p.FailureThreshold, false)
	if err != nil {
		return 0
	}
	return of(a, n, false)
}

// PauseFor is the wait after a batch passed its gate, and whether the wait
// lasts until promote or resume instead.
func PauseFor(p events.Policy) (time.Duration, bool) {
	if p.Pause == events.PauseManual {
		return 0, true
	}
	d, _ := events.ParseDuration(p.Pause)
	return d, false
}

// Deadline is the progress deadline of each batch; zero is none.
func Deadline(p events.Policy) time.Duration {
	d, _ := events.ParseDuration(p.ProgressDeadline)
	return d
}

// Aborts reports whether a failure aborts the rollout rather than pausing it.
func Aborts(p events.Policy) bool { return p.OnFailure == events.OnFailureAbort }

// SkipsRestarts reports whether VMs whose change needs a restart keep their pin.
func SkipsRestarts(p events.Policy) bool { return p.Restart == events.RestartSkip }

// OrderLabel is the label key VMs are ordered by, when the policy's order
// names one.
func OrderLabel(p events.Policy) (string, bool) {
	return strings.CutPrefix(p.Order, events.OrderLabelPrefix)
}
