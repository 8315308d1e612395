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
	"kvlive/internal/telemetry"
	"kvlive/planner/offline"
	"kvlive/readmodel/replay"
	"kvlive/rollout"
	"kvlive/undo"
)

// rolloutUndoOptions are kvlive rollout undo's flags and argument.
type rolloutUndoOptions struct {
	clusterRolloutOptions
	policy     events.Policy
	output     printer.Format
	screenRows int
	say        io.Writer
	yes, wait  bool
	timeout    time.Duration
}

func rolloutUndoCmd(g *globals) *cobra.Command {
	o := &rolloutUndoOptions{clusterRolloutOptions: newClusterRolloutOptions(g)}
	cmd := &cobra.Command{
		Use:   "undo EVENT-ID",
		Short: "Move every VM a finished rollout moved back where it was, as a rollout of its own",
		Long: `undo plans, against the cluster, moving back every VM the rollout moved: a
change's VMs to the ControllerRevision each was pinned to before it (KubeVirt
keeps it; if it is gone, it is re-created from the change's record), a
switch's VMs back to the object they were switched from. A VM someone changed
since (another pin, another instance type) or deleted is skipped and named.
It prints that plan as kvlive switch does (on a terminal in brief; -o wide or
a file lists every VM; -o json|yaml prints it as data), asks when standard
input is a terminal (--yes skips the question), then publishes an undo
request (undo/<id>, with the Kvlive-Undo-Of header and a trace linked to the
original's) that a running kvlive carries out with the batches and gates its
flags ask for. The rollout must be finished, and an undo is not undone.
kvlive plan --undo EVENT-ID previews it alone.`,
		Example: `  kvlive rollout undo vmcf/2f6c1a3b/5
  kvlive rollout undo switch/0b5c9e1d --batch-size 10% --yes --wait`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	o.bind(cmd)
	f := cmd.Flags()
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	f.BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&o.wait, "wait", false, "wait for every VM's outcome and print the counts")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "with --wait, how long to wait before giving up (the undo itself goes on)")
	bindPolicyFlags(f, &o.policy)
	return cmd
}

// Complete takes the id, the streams and the kubeconfig's clients.
func (o *rolloutUndoOptions) Complete(cmd *cobra.Command, args []string) error {
	if err := o.clusterRolloutOptions.Complete(cmd, args); err != nil {
		return err
	}
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
func (o *rolloutUndoOptions) Validate() error {
	if o.wait && o.timeout <= 0 {
		return fmt.Errorf("%w: --timeout %s: want a positive duration", errUsage, o.timeout)
	}
	return checkPolicy(o.policy)
}

// Run previews the undo, asks, requests it, and with --wait follows it.
func (o *rolloutUndoOptions) Run(ctx context.Context) error {
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		id, orig, plans, err := previewUndo(ctx, js, o.clients, o.id)
		if err != nil {
			return err
		}
		var policy *events.Policy
		if !o.policy.IsZero() {
			policy = &o.policy
			for i := range plans {
				plans[i] = rollout.WithPolicy(plans[i], *policy)
			}
		}
		if err := o.show(id, plans); err != nil {
			return err
		}
		tp, err := telemetry.Setup(ctx, "kvlive-undo", js)
		if err != nil {
			return err
		}
		defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
		r, err := replay.Publisher{JetStream: js, Tracer: tp}.Undo(ctx, orig.Event, events.UndoEventID(events.NewUndoID()), policy)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.say, "undo requested: %s (undoes %s)\n", r.EventID, id)
		if !o.wait {
			return nil
		}
		p, err := waitSwitch(ctx, js, r.EventID, o.timeout, o.errOut)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.say, "%d VMs: %v\n", len(p.Outcomes), p.Counts())
		return nil
	})
}

// show prints the preview and, on a terminal without --yes, asks.
func (o *rolloutUndoOptions) show(id string, plans []events.Plan) error {
	report := offline.NewReport(plans)
	var err error
	if o.screenRows > 0 && o.output == printer.FormatTable {
		err = report.PrintBrief(o.out, printer.Width(o.out), o.screenRows)
	} else {
		err = report.Print(o.out, o.output, printer.Width(o.out))
	}
	if err != nil || o.yes || !printer.IsTerminal(o.in) {
		return err
	}
	ok, err := confirm(o.in, o.errOut, fmt.Sprintf("Undo %s for these %d VMs?", id, len(plans)))
	if err == nil && !ok {
		err = errNotConfirmed
	}
	return err
}

// previewUndo resolves arg (a unique prefix or short form will do), reads
// what undoing it needs and plans it against the cluster as it is.
func previewUndo(ctx context.Context, js jetstream.JetStream, clients kube.Clients, arg string) (string, undo.Original, []events.Plan, error) {
	id, err := rollout.ResolveEventID(ctx, js, arg)
	if err != nil {
		return "", undo.Original{}, nil, err
	}
	orig, err := undo.Read(ctx, js, id)
	if err != nil {
		return id, orig, nil, err
	}
	f, stop, err := kube.StartCache(ctx, clients, "", kube.DefaultSyncTimeout)
	if err != nil {
		return id, orig, nil, err
	}
	defer stop()
	_, _, plans := undo.Plan(f, "undo/preview", orig)
	return id, orig, plans, nil
}
