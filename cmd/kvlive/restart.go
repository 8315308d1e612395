package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/printer"
	"kvlive/planner/offline"
	"kvlive/restart"
	"kvlive/rollout"
)

// restartOptions are kvlive restart's flags and argument.
type restartOptions struct {
	storeOptions
	fleet      *fleetFlags
	object     string
	pending    bool
	policy     events.Policy
	output     printer.Format
	screenRows int
	say        io.Writer
	yes, wait  bool
	timeout    time.Duration
}

func newRestartCmd(g *globals) *cobra.Command {
	o := &restartOptions{storeOptions: newStoreOptions(g), fleet: newFleetFlags()}
	cmd := &cobra.Command{
		Use:   "restart --pending KIND/NAME [-n NS | -A] [-l SELECTOR]",
		Short: "Restart, within a budget, the running VMs of an instance type or preference that wait for a restart",
		Long: `restart --pending plans, against the cluster, a restart of every running VM
that references KIND/NAME (in the context's namespace, -n NS, or every
namespace with -A; matching -l) and that KubeVirt flagged RestartRequired:
the VMs a rollout left waiting for their change. A VM annotated
kvlive.io/do-not-disrupt=true, one whose run strategy is Halted or Once, one
that is not running (it picks its pin up at its next start) and one with a
start or stop under way are skipped, saying so. It prints the plan (on a
terminal in brief; -o wide or a file lists every VM; -o json|yaml as data),
asks when standard input is a terminal (--yes skips the question), then
publishes a restart request (restart/<id>) that a running kvlive carries out.

The restart is KubeVirt's own, as virt-api's restart writes it: a Stop naming
the running VMI, then a Start, in the VM's status.stateChangeRequests, which
virt-controller carries out. At most --restart-budget VMs restart at once:
the rollout's batches are the budget, and each waits for KubeVirt's verdict
on the one before (a new VMI running, RestartRequired gone), however many
kvlive replicas run. The verdict of each VM is recorded, as for any rollout.`,
		Example: `  kvlive restart --pending clusterinstancetype/u1.large -A --restart-budget 2
  kvlive restart --pending instancetype/shop/small -n shop -l tier=web --yes --wait`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeKinds,
		RunE:              runE(o),
	}
	o.fleet.bindScope(cmd)
	o.store.bind(cmd)
	f := cmd.Flags()
	f.BoolVar(&o.pending, "pending", false, "restart the VMs that wait for a restart (RestartRequired); required")
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	f.BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&o.wait, "wait", false, "wait for every VM's outcome and print the counts")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "with --wait, how long to wait before giving up (the restart itself goes on)")
	bindRestartPolicyFlags(f, &o.policy)
	return cmd
}

// Complete takes the object, the streams and the logger.
func (o *restartOptions) Complete(cmd *cobra.Command, args []string) error {
	o.complete(cmd)
	o.object = args[0]
	if rows := printer.ScreenRows(o.out, briefReserved); rows > 0 {
		o.screenRows = min(rows, switchPreviewRows)
	}
	o.say = o.out
	if !o.output.Human() {
		o.say = o.errOut
	}
	return nil
}

// Validate checks the flags before anything is read.
func (o *restartOptions) Validate() error {
	switch {
	case !o.pending:
		return fmt.Errorf("%w: --pending is required: kvlive restarts only the VMs that wait for a restart", errUsage)
	case o.wait && o.timeout <= 0:
		return fmt.Errorf("%w: --timeout %s: want a positive duration", errUsage, o.timeout)
	}
	return checkPolicy(o.policy)
}

// Run previews the restart, asks, requests it, and with --wait follows it.
func (o *restartOptions) Run(ctx context.Context) error {
	req, plans, err := o.preview(ctx)
	if err != nil {
		return err
	}
	if len(plans) == 0 {
		fmt.Fprintf(o.say, "no VM %s references %s: nothing to restart\n", scope(req.Namespace), req.Object)
		return nil
	}
	restarting := 0
	for _, p := range plans {
		if p.Action.Moves() {
			restarting++
		}
	}
	if err := o.show(req, plans, restarting); err != nil {
		return err
	}
	if restarting == 0 {
		fmt.Fprintln(o.say, "no VM waits for a restart: nothing requested")
		return nil
	}
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		var policy *events.Policy
		if !o.policy.IsZero() {
			policy = &o.policy
		}
		if err := served(ctx, js, req.Namespace, o.say); err != nil {
			return err
		}
		id, err := rollout.RequestRestart(ctx, js, events.RestartRequest{
			Object: req.Object, Namespace: req.Namespace, Selector: o.fleet.selector, Policy: policy,
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.say, "restart requested: %s\n", id)
		if !o.wait {
			return nil
		}
		p, err := waitSwitch(ctx, js, id, o.timeout, o.errOut)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.say, "%d VMs: %v\n", len(p.Outcomes), p.Counts())
		return nil
	})
}

// preview plans the restart against the cluster as it is.
func (o *restartOptions) preview(ctx context.Context) (offline.Request, []events.Plan, error) {
	cfg, namespace, err := o.fleet.kube.load()
	if err != nil {
		return offline.Request{}, nil, err
	}
	req, err := o.fleet.request(o.object, namespace)
	if err != nil {
		return req, nil, err
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return req, nil, err
	}
	f, stop, err := startPlanCache(ctx, clients, req)
	if err != nil {
		return req, nil, err
	}
	defer stop()
	vms, err := f.Referencing(req.Object, req.Namespace, req.Selector)
	if err != nil {
		return req, nil, err
	}
	return req, restart.Plan(f, "restart/preview", req.Object, vms), nil
}

// show prints the preview and, on a terminal without --yes, asks.
func (o *restartOptions) show(req offline.Request, plans []events.Plan, restarting int) error {
	report := offline.NewReport(plans)
	var err error
	if o.screenRows > 0 && o.output == printer.FormatTable {
		err = report.PrintBrief(o.out, printer.Width(o.out), o.screenRows)
	} else {
		err = report.Print(o.out, o.output, printer.Width(o.out))
	}
	if err != nil || restarting == 0 {
		return err
	}
	if o.policy.RestartBudget == "" {
		fmt.Fprintf(o.say, "at most the budget of %s's rollout policy, or of kvlive run's --restart-budget (default %s), at a time\n", req.Object, events.DefaultRestartBudget)
	} else {
		policy := o.policy.ForRestart()
		fmt.Fprintf(o.say, "at most %s at a time: %s\n", policy.BatchSize, describeBatches(rollout.Batches(policy, restarting)))
	}
	if w := o.policy.RestartWindow; !w.IsZero() {
		if open, until := w.At(time.Now()); open {
			fmt.Fprintf(o.say, "restart window %s: open, until %s\n", w, until.Format(time.RFC3339))
		} else {
			fmt.Fprintf(o.say, "restart window %s: closed; the restart waits until it opens at %s\n", w, until.Format(time.RFC3339))
		}
	}
	if o.yes || !printer.IsTerminal(o.in) {
		return nil
	}
	ok, err := confirm(o.in, o.errOut, fmt.Sprintf("Restart these %d VMs of %s?", restarting, req.Object))
	if err == nil && !ok {
		err = errNotConfirmed
	}
	return err
}
