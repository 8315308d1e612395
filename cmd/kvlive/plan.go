package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/printer"
	"kvlive/planner/offline"
)

// planOptions are kvlive plan's flags and argument.
type planOptions struct {
	fleet *fleetFlags
	streams
	object  string
	output  printer.Format
	offline bool
	file    string
	// undo is the rollout whose undo to preview, read from store.
	undo  string
	store storeFlags
	log   *slog.Logger
	g     *globals
}

func newPlanCmd(g *globals) *cobra.Command {
	o := &planOptions{fleet: newFleetFlags(), g: g}
	cmd := &cobra.Command{
		Use:   "plan [KIND/NAME | --instancetype KIND/[NS/]NAME | --from FROM --to TO]",
		Short: "Predict, per VM and per field, what a change would do, without writing anything",
		Long: `plan shows what moving every VM that references an instance type or preference
to its current generation (or switching VMs from one to another) would do, per
VM: live, restart, next-boot, none or skip, with every changed field and the
reason. It reads the cluster of the current kubeconfig, or with --offline a
multi-document YAML file of VMs, VMIs, instance types, preferences,
ControllerRevisions and the KubeVirt CR, whose objects are taken as the new
generation. Nothing is written. A plan longer than the terminal is shown in
brief: VMs by result, the fields that change and as many VMs as fit; -o wide,
-o json|yaml or the output in a file has every VM.

plan --from A --to B selects VMs exactly as kvlive switch --from A --to B does
(-n, -A, -l and their defaults are the same), so it previews that switch. With
--offline, VMs in every namespace of the file are planned unless -n is given.

plan --undo EVENT-ID previews kvlive rollout undo EVENT-ID: every VM the
rollout moved, moved back (reading the rollout's records from --nats-url).`,
		Example: `  kvlive plan clusterinstancetype/u1.large -A
  kvlive plan --from clusterinstancetype/u1.small --to clusterinstancetype/u1.large -n shop -l tier=web
  kvlive plan --offline -f fleet.yaml --instancetype clusterinstancetype/u1.large -o json
  kvlive plan --undo vmcf/2f6c1a3b/5`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeKinds,
		RunE:              runE(o),
	}
	o.fleet.bind(cmd, "KIND/[NS/]NAME the VMs reference now (with --to): preview a switch",
		"KIND/[NS/]NAME the VMs would switch to (with --from)")
	f := cmd.Flags()
	f.StringVar(&o.object, "instancetype", "", "KIND/[NS/]NAME of the instance type or preference to evaluate")
	_ = cmd.RegisterFlagCompletionFunc("instancetype", completeKinds)
	// --switch was --from's name before plan and switch shared their flags.
	f.StringVar(&o.fleet.from, "switch", "", "KIND/[NS/]NAME the VMs reference now (with --to)")
	_ = f.MarkDeprecated("switch", "use --from")
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	f.BoolVar(&o.offline, "offline", false, "read the cluster from -f instead of the kubeconfig")
	f.StringVarP(&o.file, "filename", "f", "", "multi-document YAML file for --offline; - reads standard input")
	f.StringVar(&o.undo, "undo", "", "EVENT-ID of a finished rollout: preview its undo (kvlive rollout undo)")
	o.store.bind(cmd)
	return cmd
}

// Complete takes the object from the argument, if given.
func (o *planOptions) Complete(cmd *cobra.Command, args []string) error {
	o.take(cmd)
	o.log = o.g.logger()
	if len(args) == 1 {
		if o.object != "" {
			return fmt.Errorf("%w: give the object as an argument or --instancetype, not both", errUsage)
		}
		o.object = args[0]
	}
	return nil
}

// Validate wants one object, or --from and --to; and -f with --offline.
func (o *planOptions) Validate() error {
	from, to := o.fleet.from, o.fleet.to
	if o.undo != "" {
		if o.object != "" || from != "" || to != "" || o.offline {
			return fmt.Errorf("%w: --undo previews an undo alone: no object, --from/--to or --offline with it", errUsage)
		}
		return nil
	}
	if (o.object == "") == (from == "") || (from != "") != (to != "") {
		return fmt.Errorf("%w: name one object to evaluate (KIND/NAME or --instancetype), or --from FROM --to TO", errUsage)
	}
	if o.offline != (o.file != "") {
		return fmt.Errorf("%w: --offline and -f go together", errUsage)
	}
	return nil
}

// Run plans the VMs the flags select and prints the report.
func (o *planOptions) Run(ctx context.Context) error {
	var plans []events.Plan
	if o.undo != "" {
		var err error
		if plans, err = o.planUndo(ctx); err != nil {
			return err
		}
	} else if o.offline {
		// All of the file, unless -n names a namespace.
		req, err := o.fleet.request(o.object, o.fleet.kube.explicitNamespace())
		if err != nil {
			return err
		}
		if plans, err = o.planFile(ctx, req); err != nil {
			return err
		}
	} else {
		cfg, namespace, err := o.fleet.kube.load()
		if err != nil {
			return err
		}
		clients, err := kube.NewClients(cfg)
		if err != nil {
			return err
		}
		req, err := o.fleet.request(o.object, namespace)
		if err != nil {
			return err
		}
		if plans, err = planCluster(ctx, clients, req); err != nil {
			return err
		}
	}
	report := offline.NewReport(plans)
	if rows := printer.ScreenRows(o.out, briefReserved); rows > 0 && o.output == printer.FormatTable {
		return report.PrintBrief(o.out, printer.Width(o.out), rows)
	}
	return report.Print(o.out, o.output, printer.Width(o.out))
}

// planUndo plans the undo of --undo's rollout over the cluster.
func (o *planOptions) planUndo(ctx context.Context) ([]events.Plan, error) {
	clients, err := o.fleet.kube.clients()
	if err != nil {
		return nil, err
	}
	var plans []events.Plan
	err = o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		_, _, plans, err = previewUndo(ctx, js, clients, o.undo)
		return err
	})
	return plans, err
}

// briefReserved is the screen lines a brief plan keeps for its summary,
// its changes and the prompt after it.
const briefReserved = 16

// planFile plans req over the objects of the offline file (- for stdin).
func (o *planOptions) planFile(ctx context.Context, req offline.Request) ([]events.Plan, error) {
	in := o.in
	if o.file != "-" {
		file, err := os.Open(o.file)
		if err != nil {
			return nil, err
		}
		defer func() { _ = file.Close() }()
		in = file
	}
	fleet, err := offline.Load(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.file, err)
	}
	return offline.Plan(fleet, req)
}
