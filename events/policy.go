package events

import (
	"errors"
	"fmt"
	"net/url"
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
	// MigrationBudget caps how many of the rollout's running VMs whose
	// change reaches the guest by a live migration may be moved while
	// their migration has not ended, below KubeVirt's
	// parallelMigrationsPerCluster (to leave room for node drains). Zero:
	// the process's budget.
	MigrationBudget int `json:"migrationBudget,omitempty"`
	// Restart is what becomes of VMs whose change needs a restart: "move"
	// (the default, also spelled "never": the pin moves, KubeVirt flags
	// RestartRequired, and nobody restarts them), "skip" (their pin stays;
	// the outcome says so) or "pending" (the pin moves and, once the
	// rollout has settled, kvlive restarts the VMs it left waiting for a
	// restart, as kvlive restart --pending does, within this policy's
	// restartBudget and restartWindow).
	Restart string `json:"restart,omitempty"`
	// RestartBudget caps how many VMs a restart rollout (kvlive restart)
	// restarts at once: a count, or a percent (rounded up) of the VMs it
	// restarts. It is that rollout's batch size, and each batch waits for
	// KubeVirt's verdict on every VM of the one before (its new VMI
	// running), so no more are restarting at once, whichever replica moves
	// them. Empty: DefaultRestartBudget.
	RestartBudget string `json:"restartBudget,omitempty"`
	// RestartWindow, when set, is when a restart rollout may restart VMs;
	// outside it the rollout waits, paused until the window opens.
	RestartWindow Window `json:"restartWindow,omitzero"`
	// ConfirmWebhook, when set, is an HTTP(S) endpoint asked before each
	// batch is released, and CheckWebhook one asked after each batch
	// passed KubeVirt's gate, each with the batch's VMs as a CloudEvent; a
	// non-2xx answer, or none within WebhookTimeout (default 10s), fails
	// the gate (OnFailure: pause or abort). WebhookTimeout is at most
	// MaxWebhookTimeout. Webhooks are asked off the pipeline's workers:
	// one that hangs holds its own rollout alone.
	ConfirmWebhook string `json:"confirmWebhook,omitempty"`
	CheckWebhook   string `json:"checkWebhook,omitempty"`
	WebhookTimeout string `json:"webhookTimeout,omitempty"`
}

// MaxWebhookTimeout caps a policy's webhookTimeout: a gate that waits
// longer for an answer is better decided by a person (rollout promote,
// resume or abort).
const MaxWebhookTimeout = 5 * time.Minute

// DefaultRestartBudget is the restart budget of a policy that sets none.
const DefaultRestartBudget = "10%"

// ForRestart is p as a restart rollout goes by it: its batches are of the
// restart budget (a batchSize is replaced by it), and restart (what a
// change does with the VMs it would leave RestartRequired) does not apply.
func (p Policy) ForRestart() Policy {
	p.BatchSize, p.Restart = p.RestartBudget, ""
	if p.BatchSize == "" {
		p.BatchSize = DefaultRestartBudget
	}
	return p
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
	RestartNever       = "never"
	RestartSkip        = "skip"
	RestartPending     = "pending"
	maxPolicyBytes     = 4096
	percentSuffix      = "%"
	policyFieldsPrefix = "rollout policy: "
)

// IsZero reports whether p asks for nothing: one batch, no gates.
func (p Policy) IsZero() bool { return p == Policy{} }

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
	_, err := ParseAmount(p.BatchSize, true)
	check("batchSize", err)
	_, err = ParseAmount(p.Canary, true)
	check("canary", err)
	_, err = ParseAmount(p.FailureThreshold, false)
	check("failureThreshold", err)
	_, err = ParseAmount(p.RestartBudget, true)
	check("restartBudget", err)
	check("restartWindow", p.RestartWindow.Validate())
	check("confirmWebhook", checkWebhookURL(p.ConfirmWebhook))
	check("checkWebhook", checkWebhookURL(p.CheckWebhook))
	timeout, err := ParseDuration(p.WebhookTimeout)
	if err == nil && timeout > MaxWebhookTimeout {
		err = fmt.Errorf("%s is longer than the %s kvlive waits for a webhook at most", p.WebhookTimeout, MaxWebhookTimeout)
	}
	check("webhookTimeout", err)
	if p.Pause != "" && p.Pause != PauseManual {
		_, err := ParseDuration(p.Pause)
		check("pause", err)
	}
	_, err = ParseDuration(p.ProgressDeadline)
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
	case "", RestartMove, RestartNever, RestartSkip, RestartPending:
	default:
		check("restart", fmt.Errorf("%q: want move (or never), skip or pending", p.Restart))
	}
	if p.MaxInFlight < 0 {
		check("maxInFlight", fmt.Errorf("%d: want 0 (no cap) or more", p.MaxInFlight))
	}
	if p.MigrationBudget < 0 {
		check("migrationBudget", fmt.Errorf("%d: want 0 (the process's budget) or more", p.MigrationBudget))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s%w", policyFieldsPrefix, err)
	}
	return nil
}

// checkWebhookURL accepts an absolute http or https URL, or none.
func checkWebhookURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		// The value is not repeated: the error reaches the rollout's
		// record, which the reader role reads, and a hook's URL may carry
		// its secret.
		return errors.New("want an http:// or https:// URL with a host (the value is not shown: a webhook URL may carry a secret)")
	}
	return nil
}

// Amount is a count or a percent of the rollout's VMs, as a policy's
// batchSize, canary and failureThreshold give it.
type Amount struct {
	N       int
	Percent bool
}

// ParseAmount parses "50" or "10%"; positive wants more than zero. An
// empty string is the zero Amount.
func ParseAmount(s string, positive bool) (Amount, error) {
	if s == "" {
		return Amount{}, nil
	}
	num, percent := strings.CutSuffix(s, percentSuffix)
	n, err := strconv.Atoi(num)
	switch {
	case err != nil:
		return Amount{}, fmt.Errorf("%q: want a count (50) or a percent (10%%)", s)
	case n < 0 || (positive && n == 0):
		return Amount{}, fmt.Errorf("%q: want more than zero", s)
	case percent && n > 100:
		return Amount{}, fmt.Errorf("%q: a percent of at most 100", s)
	}
	return Amount{N: n, Percent: percent}, nil
}

// ParseDuration parses a policy's pause or progressDeadline; an empty
// string is zero.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a duration such as 30s or 5m", s)
	}
	return d, nil
}
