package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/internal/kube"
	"kvlive/rollout"
)

// rolloutVerifyOptions are kvlive rollout verify's flags and argument.
type rolloutVerifyOptions struct{ clusterRolloutOptions }

func rolloutVerifyCmd(g *globals) *cobra.Command {
	o := &rolloutVerifyOptions{newClusterRolloutOptions(g)}
	cmd := &cobra.Command{
		Use:   "verify EVENT-ID",
		Short: "Look again at the VMs whose verdict was pending, refused or not observed, and record what KubeVirt shows now",
		Long: `verify reads the VMs and VMIs of a rollout's VMs whose verdict is unsettled
(pending, refused or not observed when the verdict deadline passed) from the
cluster now, judges each as the verifier would, and records what it sees as a
re-observation beside the verdict, which stays as it was. kvlive outcomes shows
both (OBSERVED pending→live); a VM whose re-observation settled it is not looked
at again.`,
		Example: `  kvlive rollout verify VirtualMachineClusterInstancetype/2f6c…/5`,
		Args:    cobra.ExactArgs(1),
		RunE:    runE(o),
	}
	o.bind(cmd)
	return cmd
}

func (o *rolloutVerifyOptions) Validate() error { return nil }

// Run re-observes the rollout's unsettled VMs and says what each shows.
func (o *rolloutVerifyOptions) Run(ctx context.Context) error {
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		id, err := rollout.ResolveEventID(ctx, js, o.id)
		if err != nil {
			return err
		}
		fleet, stop, err := kube.StartCache(ctx, o.clients, "", kube.DefaultSyncTimeout)
		if err != nil {
			return err
		}
		defer stop()
		seen, err := rollout.Reobserve(ctx, js, fleet, id, time.Now())
		if err != nil {
			return err
		}
		if err := writeReobserved(o.out, id, seen.Again); err != nil {
			return err
		}
		if seen.Awaited > 0 {
			return fmt.Errorf("%d moved VMs of %s await their first verdict still (the verifier gives it at their deadline); verify again after it",
				seen.Awaited, id)
		}
		return nil
	})
}

// writeReobserved says, VM by VM, what each unsettled verdict is now.
func writeReobserved(w io.Writer, id string, seen []rollout.Reobservation) error {
	if len(seen) == 0 {
		_, err := fmt.Fprintf(w, "no VM of %s has an unsettled verdict to look at again\n", id)
		return err
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i].Now.VM.String() < seen[j].Now.VM.String() })
	for _, r := range seen {
		if _, err := fmt.Fprintf(w, "%s: %s → %s (%s)\n", r.Now.VM, r.Before.Observed, r.Now.Observed, r.Now.Reason); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d VMs of %s observed again\n", len(seen), id)
	return err
}
