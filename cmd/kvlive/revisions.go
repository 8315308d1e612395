package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"kvlive/internal/kube"
	"kvlive/internal/printer"
	"kvlive/pruner"
)

func newRevisionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revisions",
		Short: "Manage the instancetype ControllerRevisions kvlive created",
	}
	cmd.AddCommand(newPruneCmd())
	return cmd
}

// pruneOptions are kvlive revisions prune's flags.
type pruneOptions struct {
	fleet *fleetFlags
	streams
	retention int
	workers   int
	dryRun    bool
	output    printer.Format
}

func newPruneCmd() *cobra.Command {
	o := &pruneOptions{fleet: newFleetFlags()}
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete the superseded ControllerRevisions kvlive created, keeping what undo and the VMs need",
		Long: `prune deletes the instancetype and preference ControllerRevisions kvlive
created that no VM needs any more, as kvlive run does all along (its
--revision-retention): only revisions labelled kvlive.io/created-by=kvlive,
owned by their VM and named as KubeVirt names them; never the revision a VM
is pinned to, one its running VMI started from, one newer than its pin, or
the --revision-retention newest its pin superseded (the previous one is what
kvlive rollout undo moves back to). Each VM is read again from the API server
before its revisions go, and each delete carries the revision's UID and
resourceVersion. --dry-run shows what would go and deletes nothing.`,
		Example: `  kvlive revisions prune -A --dry-run
  kvlive revisions prune -n shop --revision-retention 0`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	o.fleet.bindScope(cmd)
	f := cmd.Flags()
	f.IntVar(&o.retention, "revision-retention", pruner.DefaultRetention, "superseded revisions kept per VM and reference, newest first")
	f.Float32Var(&o.fleet.kube.QPS, "qps", defaultQPS, "Kubernetes client queries per second, a ceiling: the API server's priority and fairness (deploy/base/flowcontrol.yaml) queues kvlive's requests behind other clients'")
	f.IntVar(&o.fleet.kube.Burst, "burst", defaultBurst, "Kubernetes client burst")
	f.IntVar(&o.workers, "workers", 16, "VMs pruned at once")
	f.BoolVar(&o.dryRun, "dry-run", false, "show what would be deleted; delete nothing")
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	return cmd
}

// Complete takes the streams.
func (o *pruneOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.take(cmd)
	return nil
}

// Validate refuses a negative retention (it would mean keep everything:
// nothing to do) and a selector, which prune does not take.
func (o *pruneOptions) Validate() error {
	switch {
	case o.retention < 0:
		return fmt.Errorf("%w: --revision-retention %d: want 0 or more", errUsage, o.retention)
	case o.workers < 1:
		return fmt.Errorf("%w: --workers %d: want at least 1", errUsage, o.workers)
	case o.fleet.selector != "":
		return fmt.Errorf("%w: -l: prune judges every VM of the namespace", errUsage)
	}
	return nil
}

// Run finds what may go and, unless --dry-run, deletes it VM by VM.
func (o *pruneOptions) Run(ctx context.Context) error {
	cfg, namespace, err := o.fleet.kube.load()
	if err != nil {
		return err
	}
	if namespace, _, err = o.fleet.scope(namespace); err != nil {
		return err
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return err
	}
	c, stop, err := kube.StartCache(ctx, clients, namespace, kube.DefaultSyncTimeout)
	if err != nil {
		return err
	}
	defer stop()
	cands, problems := pruner.Find(c, namespace, o.retention)
	for _, p := range problems {
		fmt.Fprintf(o.errOut, "kept every revision of VM %s/%s: %s\n", p.Namespace, p.VM, p.Reason)
	}
	if o.dryRun {
		if err := pruner.Print(o.out, cands, o.output, printer.Width(o.out), time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(o.errOut, "dry run: %d revisions would be deleted\n", len(cands))
		return nil
	}
	d, err := pruner.PruneAll(ctx, clients, c, cands, o.retention, o.workers)
	if perr := pruner.Print(o.out, d.Revisions, o.output, printer.Width(o.out), time.Now()); perr != nil {
		return errors.Join(err, perr)
	}
	fmt.Fprintf(o.errOut, "deleted %d revisions; %d kept (their VM or revision changed, or the VM went, since it was read)\n", len(d.Revisions), len(d.Kept))
	return err
}
