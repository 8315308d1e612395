package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"kvlive/drift"
	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/printer"
)

// driftOptions are kvlive drift's flags and argument.
type driftOptions struct {
	fleet *fleetFlags
	streams
	object string
	output printer.Format
}

func newDriftCmd() *cobra.Command {
	o := &driftOptions{fleet: newFleetFlags()}
	cmd := &cobra.Command{
		Use:   "drift [KIND/[NS/]NAME]",
		Short: "Show, per instance type and preference, how many VMs are on its latest generation",
		Long: `drift reads the cluster (not kvlive's records) and shows, per instance type and
preference the chosen VMs reference: its current generation; how many VMs are
pinned to it (LATEST), how many to an older generation (BEHIND, and MAX-LAG
generations at most), how many pins cannot be compared (UNKNOWN: the pinned
revision is gone, or belongs to a deleted object of the same name, or the
object is gone) and how many KubeVirt has not pinned yet (UNPINNED); how many
carry KubeVirt's RestartRequired condition, and how many are stopped (what
they are pinned to waits for their next boot). -o wide adds every VM; -o json
and -o yaml give the same with each VM's state, pinned generation and lag.
kvlive run exports BEHIND+UNKNOWN per object as kvlive_vms_behind.`,
		Example: `  kvlive drift -A
  kvlive drift clusterinstancetype/u1.large -n shop -o wide
  kvlive drift -A -l tier=web -o json`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeKinds,
		RunE:              runE(o),
	}
	o.fleet.bindScope(cmd)
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	return cmd
}

// Complete takes the object from the argument, if given.
func (o *driftOptions) Complete(cmd *cobra.Command, args []string) error {
	o.take(cmd)
	if len(args) == 1 {
		o.object = args[0]
	}
	return nil
}

// Validate has nothing to refuse before the kubeconfig is read.
func (o *driftOptions) Validate() error { return nil }

// Run reads the cluster into a cache and prints its drift.
func (o *driftOptions) Run(ctx context.Context) error {
	cfg, namespace, err := o.fleet.kube.load()
	if err != nil {
		return err
	}
	var filter drift.Filter
	if filter.Namespace, filter.Selector, err = o.fleet.scope(namespace); err != nil {
		return err
	}
	if o.object != "" {
		ref, err := events.ParseRef(o.object, namespace)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		filter.Object = &ref
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return err
	}
	c, stop, err := kube.StartCache(ctx, clients, filter.Namespace, kube.DefaultSyncTimeout)
	if err != nil {
		return err
	}
	defer stop()
	return drift.Print(o.out, drift.Measure(c, filter), o.output, printer.Width(o.out))
}
