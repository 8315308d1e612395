package rollout

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	virtv1 "kubevirt.io/api/core/v1"

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

// WithPolicy applies what the policy says of a plan by itself: with
// restart: skip, a VM whose change needs a restart keeps its pin, and so
// does one KubeVirt would evict to bring the change in (an eviction is a
// restart KubeVirt makes itself).
func WithPolicy(plan events.Plan, policy events.Policy) events.Plan {
	if SkipsRestarts(policy) && (plan.Action == events.ResultRestart || plan.Action == events.ResultEvict) {
		plan.Action, plan.Reason = events.ResultSkip, "rollout policy restart: skip; the change needs a restart: "+plan.Reason
	}
	return plan
}

// AssignBatches orders plans by the policy and numbers the batches of the
// VMs that move; a plan that moves nothing stays in batch 0 (it settles at
// once and takes no room in a batch). It returns the batch sizes, nil for
// a rollout in one batch. plans and vms are in the same order.
func AssignBatches(plans []events.Plan, vms []*virtv1.VirtualMachine, policy events.Policy) []int {
	labelOf := map[string]string{}
	key, byLabel := OrderLabel(policy)
	for _, vm := range vms {
		if byLabel {
			labelOf[string(vm.UID)] = vm.Labels[key]
		}
	}
	slices.SortStableFunc(plans, func(a, b events.Plan) int {
		if policy.Order == events.OrderStoppedFirst {
			if c := cmp.Compare(rank(a), rank(b)); c != 0 {
				return c
			}
		}
		return cmp.Or(
			cmp.Compare(labelOf[a.VM.UID], labelOf[b.VM.UID]),
			cmp.Compare(a.VM.Namespace, b.VM.Namespace),
			cmp.Compare(a.VM.Name, b.VM.Name))
	})
	moving := 0
	for _, plan := range plans {
		if plan.Action.Moves() {
			moving++
		}
	}
	sizes := Batches(policy, moving)
	if len(sizes) <= 1 {
		return nil
	}
	batch, left := 0, sizes[0]
	for i := range plans {
		if !plans[i].Action.Moves() {
			continue
		}
		for left == 0 {
			batch++
			left = sizes[batch]
		}
		plans[i].Batch = batch
		left--
	}
	return sizes
}

// rank puts stopped VMs (next boot) first.
func rank(p events.Plan) int {
	if p.Action == events.ResultNextBoot {
		return 0
	}
	return 1
}
