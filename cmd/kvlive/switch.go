package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/internal/rollout"
)

func newSwitchCmd(g *globals) *cobra.Command {
	var from, to, namespace, selector, url string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "switch --from KIND/NAME --to KIND/NAME [-n NS] [-l SELECTOR]",
		Short: "Ask the pipeline to move VMs from one instance type (or preference) to another",
		Long: `switch publishes a switch request that a running kvlive carries out: every VM
referencing --from (in namespace -n, or all namespaces; matching -l) is planned
and moved to --to. KIND is instancetype, clusterinstancetype, preference or
clusterpreference; a namespaced KIND takes KIND/NAMESPACE/NAME or -n.`,
		Example: `  kvlive switch --from clusterinstancetype/u1.small --to clusterinstancetype/u1.large -l tier=web --wait`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fromRef, err := events.ParseRef(from, namespace)
			if err != nil {
				return fmt.Errorf("%w: --from: %w", errUsage, err)
			}
			toRef, err := events.ParseRef(to, namespace)
			if err != nil {
				return fmt.Errorf("%w: --to: %w", errUsage, err)
			}
			if _, err := labels.Parse(selector); err != nil {
				return fmt.Errorf("%w: -l %q: %w", errUsage, selector, err)
			}
			if wait && timeout <= 0 {
				return fmt.Errorf("%w: --timeout %s: want a positive duration", errUsage, timeout)
			}
			req := events.SwitchRequest{From: fromRef, To: toRef, Namespace: namespace, Selector: selector}
			nc, err := bus.Connect("kvlive-switch", g.logger(), url)
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			id, err := rollout.RequestSwitch(ctx, js, req)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "switch requested: %s\n", id)
			if !wait {
				return nil
			}
			p, err := waitSwitch(ctx, js, id, timeout, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			counts := p.Counts()
			results := make([]string, 0, len(counts))
			for r, n := range counts {
				results = append(results, fmt.Sprintf("%s=%d", r, n))
			}
			sort.Strings(results)
			fmt.Fprintf(out, "%d VMs: %v\n", len(p.Outcomes), results)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "KIND/NAME the VMs reference now")
	f.StringVar(&to, "to", "", "KIND/NAME the VMs should reference")
	f.StringVarP(&namespace, "namespace", "n", "", "only VMs in this namespace (default: all namespaces)")
	f.StringVarP(&selector, "selector", "l", "", "only VMs matching this label selector")
	f.StringVar(&url, "nats-url", "nats://127.0.0.1:4222", "NATS server kvlive run uses")
	f.BoolVar(&wait, "wait", false, "wait for every VM's outcome and print the counts")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "with --wait, how long to wait before giving up (the switch itself goes on)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
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
