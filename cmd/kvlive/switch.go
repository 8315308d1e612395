package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/internal/kube"
	"kvlive/internal/printer"
	"kvlive/planner/offline"
	"kvlive/planner/preview"
	"kvlive/rollout"
)

// switchOptions are kvlive switch's flags.
type switchOptions struct {
	g      *globals
	fleet  *fleetFlags
	auth   natsAuthFlags
	policy events.Policy
	url    string
	output printer.Format
	// screenRows is how many VMs of the plan fit the screen before the
	// question: 0 prints them all (a file, a pipe, or -o wide).
	screenRows int
	// say is where the switch's own lines go: standard output, or
	// standard error when the plan is printed as data.
	say     io.Writer
	yes     bool
	wait    bool
	timeout time.Duration
	streams
	log *slog.Logger
	// flags are the parsed flags, for --request-timeout, read when the bus
	// is (the kubeconfig reads it first, its own way).
	flags *pflag.FlagSet
}

func newSwitchCmd(g *globals) *cobra.Command {
	o := &switchOptions{g: g, fleet: newFleetFlags()}
	cmd := &cobra.Command{
		Use:   "switch --from KIND/NAME --to KIND/NAME [-n NS | -A] [-l SELECTOR]",
		Short: "Move VMs from one instance type (or preference) to another, after showing the plan",
		Long: `switch plans every VM referencing --from (in the context's namespace,
-n NS, or every namespace with -A; matching -l) as kvlive plan --from --to
would show it (asking a running kvlive, which plans it from its cache, or,
with none that answers, reading the cluster), prints that plan (on a terminal, in
brief: VMs by result, the fields that change and the first 20 VMs; -o wide,
or the output in a file, lists every VM; -o json|yaml prints the plan as data
and the switch's own lines on standard error), asks for confirmation
when standard input is a terminal (--yes skips the question), then publishes a
switch request that a running kvlive carries out. KIND is instancetype,
clusterinstancetype, preference or clusterpreference; a namespaced KIND takes
KIND/NAMESPACE/NAME or -n. Both must exist: a typo is an error, not a switch
of nothing.`,
		Example: `  kvlive switch --from clusterinstancetype/u1.small --to clusterinstancetype/u1.large -A -l tier=web --wait
  kvlive switch --from instancetype/shop/small --to instancetype/shop/large -n shop --yes`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	o.fleet.bind(cmd, "KIND/[NS/]NAME the VMs reference now", "KIND/[NS/]NAME the VMs should reference")
	f := cmd.Flags()
	f.StringVar(&o.url, "nats-url", "nats://127.0.0.1:4222", "NATS server kvlive run uses")
	o.auth.bind(f)
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	f.BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&o.wait, "wait", false, "wait for every VM's outcome and print the counts")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "with --wait, how long to wait before giving up (the switch itself goes on)")
	bindPolicyFlags(f, &o.policy)
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// Complete takes the streams, the logger and the flags.
func (o *switchOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.take(cmd)
	o.log, o.flags = o.g.logger(), cmd.Flags()
	if rows := printer.ScreenRows(o.out, briefReserved); rows > 0 {
		o.screenRows = min(rows, switchPreviewRows)
	}
	if !o.output.Human() {
		// The plan as data on standard output, alone; what the switch
		// says besides goes to standard error.
		o.say = o.errOut
	} else {
		o.say = o.out
	}
	return nil
}

// switchPreviewRows bounds the VMs a switch's preview lists on a terminal
// before it asks: the summary and the changes above them say the rest.
const switchPreviewRows = 20

// Validate checks the flags before anything is read.
func (o *switchOptions) Validate() error {
	if o.wait && o.timeout <= 0 {
		return fmt.Errorf("%w: --timeout %s: want a positive duration", errUsage, o.timeout)
	}
	return checkPolicy(o.policy)
}

// asked is the rollout policy the flags ask for, nil for the default.
func (o *switchOptions) asked() *events.Policy {
	if o.policy.IsZero() {
		return nil
	}
	return &o.policy
}

// Run previews the switch, asks, requests it, and with --wait follows it.
func (o *switchOptions) Run(ctx context.Context) error {
	policy := o.asked()
	req, clients, err := o.request()
	if err != nil {
		return err
	}
	js, closeBus, err := o.connect()
	if err != nil {
		return err
	}
	defer closeBus()
	if err := served(ctx, js, req.Namespace, o.say); err != nil {
		return err
	}
	plans, err := o.preview(ctx, js, clients, req)
	if err != nil || len(plans) == 0 {
		if err == nil {
			fmt.Fprintf(o.say, "no VM %s references %s: nothing to switch\n", scope(req.Namespace), req.From)
		}
		return err
	}
	if policy != nil {
		for i := range plans {
			plans[i] = rollout.WithPolicy(plans[i], *policy)
		}
	}
	if err := o.show(req, plans, policy); err != nil {
		return err
	}
	id, err := rollout.RequestSwitch(ctx, js, events.SwitchRequest{
		From: *req.From, To: req.Object, Namespace: req.Namespace, Selector: o.fleet.selector, Policy: policy,
		ForceConflicts: req.ForceConflicts,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.say, "switch requested: %s\n", id)
	if !o.wait {
		return nil
	}
	return o.follow(ctx, js, id)
}

// request is the switch the flags ask for, and the clients of the
// kubeconfig's cluster.
func (o *switchOptions) request() (offline.Request, kube.Clients, error) {
	cfg, namespace, err := o.fleet.kube.load()
	if err != nil {
		return offline.Request{}, kube.Clients{}, err
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return offline.Request{}, kube.Clients{}, err
	}
	req, err := o.fleet.request("", namespace)
	return req, clients, err
}

// previewWait is how long the switch waits for each part of a running
// kvlive's preview before it reads the cluster itself.
const previewWait = 10 * time.Second

// preview plans the switch as the cluster is: from the cache of a running
// kvlive (preview.Ask), which is what its planner will plan from and
// costs the API server nothing, or, with none that can answer, from the
// cluster read here (planCluster), which also says what is wrong with a
// request a replica refused, and whether a switch a replica found no VM
// for has none indeed.
func (o *switchOptions) preview(ctx context.Context, js jetstream.JetStream, clients kube.Clients, req offline.Request) ([]events.Plan, error) {
	return preview.AskOrRead(ctx, js.Conn(), req, previewWait, o.log, func(ctx context.Context) ([]events.Plan, error) {
		return planCluster(ctx, clients, req)
	})
}

// show prints the preview and, on a terminal without --yes, asks.
func (o *switchOptions) show(req offline.Request, plans []events.Plan, policy *events.Policy) error {
	out := o.out
	report, err := offline.NewReport(plans), error(nil)
	if o.screenRows > 0 && o.output == printer.FormatTable {
		err = report.PrintBrief(out, printer.Width(out), o.screenRows)
	} else {
		err = report.Print(out, o.output, printer.Width(out))
	}
	if err != nil {
		return err
	}
	moving := 0
	for _, p := range plans {
		if p.Action.Moves() {
			moving++
		}
	}
	if policy != nil && rollout.Batched(*policy, moving) {
		fmt.Fprintf(o.say, "in %s\n", describeBatches(rollout.Batches(*policy, moving)))
	}
	if !o.yes && printer.IsTerminal(o.in) {
		ok, err := confirm(o.in, o.errOut, fmt.Sprintf("Switch these %d VMs from %s to %s?", len(plans), req.From, req.Object))
		if err != nil {
			return err
		}
		if !ok {
			return errNotConfirmed
		}
	}
	return nil
}

// connect opens the bus the switch is requested on, reads bounded by
// --request-timeout.
func (o *switchOptions) connect() (jetstream.JetStream, func(), error) {
	auth, err := o.auth.options()
	if err != nil {
		return nil, nil, err
	}
	bound, err := readBound(o.flags)
	if err != nil {
		return nil, nil, err
	}
	nc, err := bus.Connect("kvlive-switch", o.log, o.url, auth...)
	if err != nil {
		return nil, nil, err
	}
	js, err := bus.NewJetStream(nc, bound)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// follow waits for the switch's outcomes and prints the counts.
func (o *switchOptions) follow(ctx context.Context, js jetstream.JetStream, id string) error {
	p, err := waitSwitch(ctx, js, id, o.timeout, o.errOut)
	if err != nil {
		return err
	}
	counts := p.Counts()
	results := make([]string, 0, len(counts))
	for r, n := range counts {
		results = append(results, fmt.Sprintf("%s=%d", r, n))
	}
	sort.Strings(results)
	fmt.Fprintf(o.say, "%d VMs: %v\n", len(p.Outcomes), results)
	return nil
}

// describeBatches renders batch sizes: "11 batches: 5, 100, 100, … 95".
func describeBatches(sizes []int) string {
	parts := make([]string, 0, min(len(sizes), 5))
	for i, n := range sizes {
		if i == 3 && len(sizes) > 5 {
			parts = append(parts, "…", strconv.Itoa(sizes[len(sizes)-1]))
			break
		}
		parts = append(parts, strconv.Itoa(n))
	}
	return fmt.Sprintf("%d batches of VMs that move: %s", len(sizes), strings.Join(parts, ", "))
}

// scope says where VMs were looked for: "in namespace shop", or "in any
// namespace".
func scope(namespace string) string {
	if namespace == "" {
		return "in any namespace"
	}
	return "in namespace " + namespace
}

// progressEvery is how often `switch --wait` reports progress.
const progressEvery = 5 * time.Second

// waitSwitch follows the switch's outcomes until every planned VM has one,
// printing progress to w every few seconds. When the wait ends early (the
// timeout, or Ctrl-C) it says the switch still runs and how to follow it.
func waitSwitch(ctx context.Context, js jetstream.JetStream, id string, timeout time.Duration, w io.Writer) (rollout.Progress, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last time.Time
	p, err := rollout.Follow(ctx, js, id, func(p rollout.Progress) {
		if time.Since(last) < progressEvery {
			return
		}
		last = time.Now()
		if p.Planned == 0 {
			fmt.Fprintln(w, "waiting for the planner…")
			return
		}
		fmt.Fprintf(w, "%d of %d VMs have an outcome\n", len(p.Outcomes), p.Planned)
	})
	if err == nil {
		return p, nil
	}
	why := "interrupted"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		why = "--timeout " + timeout.String() + " passed"
	}
	if ctx.Err() != nil {
		return p, fmt.Errorf("stopped waiting (%s) with %d of %d VMs done: the switch %s is queued and goes on; follow it with kvlive rollout status %s",
			why, len(p.Outcomes), p.Planned, id, id)
	}
	return p, err
}

// served refuses a request for a namespace the bus's replicas do not
// serve, and says so when no replica serves the bus yet.
func served(ctx context.Context, js jetstream.JetStream, namespace string, say io.Writer) error {
	warning, err := events.Serves(ctx, js, namespace)
	if warning != "" {
		_, _ = fmt.Fprintln(say, "warning: "+warning)
	}
	return err
}
