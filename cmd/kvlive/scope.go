package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/events"
)

// scopeOptions are kvlive scope's flags.
type scopeOptions struct {
	storeOptions
	clear, force bool
}

func newScopeCmd(g *globals) *cobra.Command {
	o := &scopeOptions{storeOptions: newStoreOptions(g)}
	cmd := &cobra.Command{
		Use:   "scope",
		Short: "Show (or clear) the scope the replicas sharing a bus serve",
		Long: `The first kvlive run on a bus claims it for its scope (its -n, or every
namespace), once and atomically; a replica of another scope is refused. scope
shows the claim. --clear clears a claim no replica holds any more (all of its
replicas stopped), so the next kvlive run claims the bus for its own scope; it
refuses while a replica still pulls from the planner's or the applier's
consumer, unless --force.`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	o.store.bind(cmd)
	cmd.Flags().BoolVar(&o.clear, "clear", false, "clear the claim, for the next kvlive run to claim the bus")
	cmd.Flags().BoolVar(&o.force, "force", false, "with --clear: clear it even while replicas pull from the work consumers")
	return cmd
}

func (o *scopeOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.complete(cmd)
	return nil
}

// Validate wants --force only with --clear.
func (o *scopeOptions) Validate() error {
	if o.force && !o.clear {
		return fmt.Errorf("%w: --force goes with --clear", errUsage)
	}
	return nil
}

// Run shows the claim, or clears it.
func (o *scopeOptions) Run(ctx context.Context) error {
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		if o.clear {
			claim, err := events.ClearScope(ctx, js, o.force)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(o.out, "cleared: the bus served %s; the next kvlive run claims it\n", claim)
			return nil
		}
		claim, _, err := events.ReadScope(ctx, js)
		if errors.Is(err, events.ErrNoScopeClaim) {
			_, _ = fmt.Fprintln(o.out, "unclaimed: the next kvlive run claims this bus for its scope")
			return nil
		}
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintf(o.out, "this bus serves %s\n", claim)
		return nil
	})
}
