package events

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// PolicyAnnotation on an instance type or preference holds the rollout
// policy of its changes, as YAML or JSON.
const PolicyAnnotation = "kvlive.io/rollout-policy"

// Policy says how a rollout proceeds: in batches, each checked before the
// next is released. The zero Policy is one batch, no gates: every VM at
// once, as a rollout without a policy always went.
type Policy struct {
	// BatchSize is how many of the matched VMs each batch takes: a count
	// ("50") or a percent ("10%", rounded up). Empty: the rest in one batch.
	BatchSize string `json:"batchSize,omitempty"`
	// Canary is an optional first batch, a count or a percent (rounded
	// up), taken before the batches of BatchSize.
	Canary string `json:"canary,omitempty"`
	// Pause is the wait between a batch that passed its gate and the next:
	// a duration ("5m"), or "manual" to wait for rollout promote (or
	// resume). Empty: no wait.
	Pause string `json:"pause,omitempty"`
	// FailureThreshold is how many failed VMs the rollout tolerates: a
	// count, or a percent of the matched VMs (rounded down). One more
	// trips OnFailure. Empty: none is tolerated.
	FailureThreshold string `json:"failureThreshold,omitempty"`
	// OnFailure is what a tripped threshold, a failed gate or a lapsed
	// deadline does: "pause" (the default) or "abort".
	OnFailure string `json:"onFailure,omitempty"`
	// ProgressDeadline bounds each batch, from its release to its gate
	// passing: a duration. Empty: no deadline.
	ProgressDeadline string `json:"progressDeadline,omitempty"`
	// Order is the order VMs are taken in: "name" (namespace, then name;
	// the default), "stopped-first", or "label=KEY" (by that label's value,
	// then name).
	Order string `json:"order,omitempty"`
	// MaxInFlight caps how many of the rollout's VMs each applier replica
	// moves at once (its --workers cap every rollout together). Zero: no
	// cap of the rollout's own.
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// Restart is what becomes of VMs whose change needs a restart: "move"
	// (the default; the pin moves and KubeVirt flags RestartRequired) or
	// "skip" (their pin stays; the outcome says so).
	Restart string `json:"restart,omitempty"`
}

// Policy values.
const (
	PauseManual        = "manual"
	OnFailurePause     = "pause"
	OnFailureAbort     = "abort"
	OrderName          = "name"
	OrderStoppedFirst  = "stopped-first"
	OrderLabelPrefix   = "label="
	RestartMove        = "move"
	RestartSkip        = "skip"
	maxPolicyBytes     = 4096
	percentSuffix      = "%"
	policyFieldsPrefix = "rollout policy: "
)

// IsZero reports whether p asks for nothing: one batch, no gates.
func (p Policy) IsZero() bool { return p == Policy{} }

// Batched reports whether p splits a rollout of n VMs into batches that
// are released one after another.
func (p Policy) Batched(n int) bool { return len(p.Batches(n)) > 1 }

// ParsePolicy decodes a policy from YAML or JSON, strictly (an unknown
// field is an error), and validates it.
func ParsePolicy(s string) (Policy, error) {
	var p Policy
	if len(s) > maxPolicyBytes {
		return p, fmt.Errorf("%s%d bytes, more than %d", policyFieldsPrefix, len(s), maxPolicyBytes)
	}
	if err := yaml.UnmarshalStrict([]byte(s), &p); err != nil {
		return p, fmt.Errorf("%s%w", policyFieldsPrefix, err)
	}
	return p, p.Validate()
}

// Validate checks every field, naming the ones that are wrong.
func (p Policy) Validate() error {
	var errs []error
	check := func(field string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
	}
	_, err := countOrPercent(p.BatchSize, true)
	check("batchSize", err)
	_, err = countOrPercent(p.Canary, true)
	check("canary", err)
	_, err = countOrPercent(p.FailureThreshold, false)
	check("failureThreshold", err)
	if p.Pause != "" && p.Pause != PauseManual {
		_, err := duration(p.Pause)
		check("pause", err)
	}
	_, err = duration(p.ProgressDeadline)
	check("progressDeadline", err)
	switch p.OnFailure {
	case "", OnFailurePause, OnFailureAbort:
	default:
		check("onFailure", fmt.Errorf("%q: want pause or abort", p.OnFailure))
	}
	switch {
	case p.Order == "", p.Order == OrderName, p.Order == OrderStoppedFirst:
	case strings.HasPrefix(p.Order, OrderLabelPrefix) && len(p.Order) > len(OrderLabelPrefix):
	default:
		check("order", fmt.Errorf("%q: want name, stopped-first or label=KEY", p.Order))
	}
	switch p.Restart {
	case "", RestartMove, RestartSkip:
	default:
		check("restart", fmt.Errorf("%q: want move or skip", p.Restart))
	}
	if p.MaxInFlight < 0 {
		check("maxInFlight", fmt.Errorf("%d: want 0 (no cap) or more", p.MaxInFlight))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s%w", policyFieldsPrefix, err)
	}
	return nil
}

// amount is a count or a percent.
type amount struct {
	n       int
	percent bool
}

// of resolves the amount against total, percents rounded up (a batch) or
// down (a threshold).
func (a amount) of(total int, up bool) int {
	if !a.percent {
		return a.n
	}
	f := float64(total) * float64(a.n) / 100
	if up {
		return int(math.Ceil(f))
	}
	return int(math.Floor(f))
}

// countOrPercent parses "50" or "10%"; positive wants more than zero.
func countOrPercent(s string, positive bool) (amount, error) {
	if s == "" {
		return amount{}, nil
	}
	num, percent := strings.CutSuffix(s, percentSuffix)
	n, err := strconv.Atoi(num)
	switch {
	case err != nil:
		return amount{}, fmt.Errorf("%q: want a count (50) or a percent (10%%)", s)
	case n < 0 || (positive && n == 0):
		return amount{}, fmt.Errorf("%q: want more than zero", s)
	case percent && n > 100:
		return amount{}, fmt.Errorf("%q: a percent of at most 100", s)
	}
	return amount{n: n, percent: percent}, nil
}

func duration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a duration such as 30s or 5m", s)
	}
	return d, nil
}

// Batches splits n VMs into batch sizes, in order: the canary first (when
// set), then batches of BatchSize, the last one the rest. Every batch has
// at least one VM; n = 0 is no batch.
func (p Policy) Batches(n int) []int {
	if n <= 0 {
		return nil
	}
	var sizes []int
	left := n
	if c, err := countOrPercent(p.Canary, true); err == nil && p.Canary != "" {
		first := min(max(c.of(n, true), 1), left)
		sizes, left = append(sizes, first), left-first
	}
	size := left
	if b, err := countOrPercent(p.BatchSize, true); err == nil && p.BatchSize != "" {
		size = max(b.of(n, true), 1)
	}
	for left > 0 {
		take := min(size, left)
		sizes, left = append(sizes, take), left-take
	}
	return sizes
}

// Tolerated is how many failed VMs a rollout of n VMs tolerates.
func (p Policy) Tolerated(n int) int {
	a, err := countOrPercent(p.FailureThreshold, false)
	if err != nil {
		return 0
	}
	return a.of(n, false)
}

// PauseFor is the wait after a batch passed its gate, and whether the wait
// lasts until promote or resume instead.
func (p Policy) PauseFor() (time.Duration, bool) {
	if p.Pause == PauseManual {
		return 0, true
	}
	d, _ := duration(p.Pause)
	return d, false
}

// Deadline is the progress deadline of each batch; zero is none.
func (p Policy) Deadline() time.Duration {
	d, _ := duration(p.ProgressDeadline)
	return d
}

// Aborts reports whether a failure aborts the rollout rather than pausing it.
func (p Policy) Aborts() bool { return p.OnFailure == OnFailureAbort }

// SkipsRestarts reports whether VMs whose change needs a restart keep their pin.
func (p Policy) SkipsRestarts() bool { return p.Restart == RestartSkip }

// OrderLabel is the label key VMs are ordered by, when Order names one.
func (p Policy) OrderLabel() (string, bool) { return strings.CutPrefix(p.Order, OrderLabelPrefix) }
