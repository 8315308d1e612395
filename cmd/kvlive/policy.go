package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"kvlive/events"
)

// bindPolicyFlags binds the rollout policy's fields to flags: kvlive run's
// default policy, and kvlive switch's for its own rollout.
func bindPolicyFlags(f *pflag.FlagSet, p *events.Policy) {
	f.StringVar(&p.BatchSize, "batch-size", "", "roll out in batches of this many VMs, a count (50) or a percent (10%) of the matched VMs; empty: one batch")
	f.StringVar(&p.Order, "order", "", "order VMs are taken in: name (default), stopped-first, or label=KEY")
	f.StringVar(&p.Restart, "restart", "", "VMs whose change needs a restart: move (default; or never), skip, or pending (kvlive restarts them once the rollout settled, within --restart-budget and --restart-window)")
	f.StringVar(&p.RestartBudget, "restart-budget", "", "VMs a restart rollout restarts at once, a count or a percent; default "+events.DefaultRestartBudget)
	bindGateFlags(f, p)
}

// bindRestartPolicyFlags binds the policy fields a restart rollout goes by:
// its batches are its budget, so it takes no --batch-size, and --restart
// (what a change does with VMs it leaves RestartRequired) is not its.
func bindRestartPolicyFlags(f *pflag.FlagSet, p *events.Policy) {
	f.StringVar(&p.RestartBudget, "restart-budget", "", "VMs restarted at once, a count (2) or a percent (10%) of the VMs restarted; default "+events.DefaultRestartBudget)
	f.StringVar(&p.Order, "order", "", "order VMs are taken in: name (default) or label=KEY")
	bindGateFlags(f, p)
}

// bindGateFlags binds what every batched rollout's gates go by: the
// canary, pauses, failure handling and deadline, the per-replica cap, the
// restart window and the webhooks.
func bindGateFlags(f *pflag.FlagSet, p *events.Policy) {
	f.StringVar(&p.Canary, "canary", "", "a first batch of this many VMs (count or percent) before the others")
	f.StringVar(&p.Pause, "pause", "", "wait between batches: a duration (5m), or manual for kvlive rollout promote")
	f.StringVar(&p.FailureThreshold, "failure-threshold", "", "failed VMs tolerated (count or percent of the matched VMs) before --on-failure; default none")
	f.StringVar(&p.OnFailure, "on-failure", "", "what a failed gate or a missed deadline does: pause (default) or abort")
	f.StringVar(&p.ProgressDeadline, "progress-deadline", "", "how long each batch may take to pass its gate (default 10m)")
	f.IntVar(&p.MaxInFlight, "max-in-flight", 0, "VMs of one rollout each applier replica moves at once; 0: only --workers caps them")
	f.IntVar(&p.MigrationBudget, "migration-budget", 0, "running VMs kvlive moves whose live migration has not ended, below KubeVirt's parallelMigrationsPerCluster (to leave room for node drains); 0: KubeVirt's")
	bindWindowFlags(f, &p.RestartWindow)
	bindWebhookFlags(f, p)
}

// bindWebhookFlags binds a policy's confirm and check webhooks.
func bindWebhookFlags(f *pflag.FlagSet, p *events.Policy) {
	f.StringVar(&p.ConfirmWebhook, "confirm-webhook", "", "an http(s) URL asked before each batch is released (a CloudEvent of its VMs); a non-2xx answer or none fails the gate")
	f.StringVar(&p.CheckWebhook, "check-webhook", "", "an http(s) URL asked after each batch passed KubeVirt's gate (its VMs and verdicts); a non-2xx answer or none fails the gate")
	f.StringVar(&p.WebhookTimeout, "webhook-timeout", "", "how long a webhook may take to answer (default 10s)")
}

// bindWindowFlags binds a restart window's schedule, duration and zone.
func bindWindowFlags(f *pflag.FlagSet, w *events.Window) {
	f.StringVar(&w.Schedule, "restart-window", "", `when restarts may start: a cron schedule of five fields ("0 22 * * 1-5"); empty: any time`)
	f.StringVar(&w.Duration, "restart-window-duration", "", "how long the restart window stays open once it opens (4h)")
	f.StringVar(&w.TimeZone, "restart-window-time-zone", "", "the IANA time zone --restart-window is read in (Europe/Paris); default UTC")
}

// checkPolicy turns a policy flag's mistake into a usage error.
func checkPolicy(p events.Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}
