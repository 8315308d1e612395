package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/events"
	"kvlive/internal/inspect"
	"kvlive/internal/kube"
	"kvlive/internal/printer"
	"kvlive/internal/replay"
	"kvlive/internal/telemetry"
	"kvlive/rollout"
)

func newRolloutCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Pause, resume or abort an event's rollout, or show where it stands",
		Long: `rollout controls one event's rollout while the applier carries it out.

pause holds the event's plans: VMs already being moved finish, every other
plan is parked untouched until resume sends it back. abort is final: VMs not
yet moved get a skip outcome saying the rollout was aborted (replay the event
to run it again). An event can be paused or aborted before it happens, with
--ahead: its id is <kind>/<uid>/<generation>. An id kvlive has no rollout of
is otherwise an error, so a typo never answers "paused". Each change is a
compare-and-set on the event's record, so two operators never overwrite each
other unseen; --force overwrites a record that no longer decodes, or one of
a rollout that has finished (pause and abort refuse those otherwise).

status derives the rollout's phase from its accounting (every planned VM
has an outcome, a dead letter, a held plan or a plan in flight): pending,
running, paused, aborted, complete, or incomplete with how many VMs are
unaccounted for and since when.`,
		Example: `  kvlive rollout pause VirtualMachineClusterInstancetype/2f6c…/5 --reason "checking the first VMs"
  kvlive rollout status VirtualMachineClusterInstancetype/2f6c…/5
  kvlive rollout resume VirtualMachineClusterInstancetype/2f6c…/5
  kvlive rollout abort switch/0b5c… --reason "wrong target"`,
	}
	for _, action := range []events.ControlAction{events.ActionPause, events.ActionResume, events.ActionAbort} {
		cmd.AddCommand(rolloutActionCmd(g, action))
	}
	cmd.AddCommand(rolloutStatusCmd(g), rolloutPromoteCmd(g), rolloutRetryCmd(g))
	return cmd
}

func rolloutRetryCmd(g *globals) *cobra.Command {
	var store storeFlags
	kubeFlags := kube.NewFlags()
	cmd := &cobra.Command{
		Use:   "retry EVENT-ID",
		Short: "Roll a finished rollout's failed VMs out again, as a new event linked to it",
		Long: `retry publishes the event again as a new one (retry/<id>, with the
Kvlive-Retry-Of header and a trace linked to the original's), limited to the
VMs whose latest outcome in it is failed. A change retries as its object's
current generation, as a replay does; a switch as it was asked. The rollout
must be finished (kvlive rollout status says complete, incomplete or aborted):
retrying VMs still in flight would move them twice. The original's control
record notes the retry and the VMs it took (rollout status shows it), and
a VM is retried once per rollout: retry the retry for those that fail again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := kubeFlags.Load()
			if err != nil {
				return err
			}
			clients, err := kube.NewClients(cfg)
			if err != nil {
				return err
			}
			return withJetStream(cmd, g, &store, func(ctx context.Context, js jetstream.JetStream) error {
				return retryRollout(ctx, cmd.OutOrStdout(), js, clients, args[0])
			})
		},
	}
	kubeFlags.AddFlags(cmd.Flags(), "")
	store.bind(cmd)
	cmd.ValidArgsFunction = store.completeEventIDs
	return cmd
}

// retryRollout retries the failed VMs of the rollout arg names (a unique
// prefix will do), with the cluster's objects at hand for a change's
// current generation, and says what it published.
func retryRollout(ctx context.Context, out io.Writer, js jetstream.JetStream, clients kube.Clients, arg string) error {
	f, stop, err := kube.StartCache(ctx, clients, "", kube.DefaultSyncTimeout)
	if err != nil {
		return err
	}
	defer stop()
	tp, err := telemetry.Setup(ctx, "kvlive-retry", js)
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	r, failed, err := replay.Publisher{JetStream: js, Fleet: f, Tracer: tp}.RetryFailed(ctx, arg, whoAmI())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "retrying %d failed VMs of %s as %s\n", len(failed), r.Original, r.EventID)
	return nil
}

func rolloutPromoteCmd(g *globals) *cobra.Command {
	var store storeFlags
	cmd := &cobra.Command{
		Use:   "promote EVENT-ID",
		Short: "Release a batched rollout's next batch now, skipping its gate and pause (and a paused canary)",
		Long: `promote releases the batch after the last released one at once, whatever the
gate of the released batch says and however long the policy's pause has to
run, and resumes the rollout if it was paused (a pause: manual waits for
this). The decision is a compare-and-set on the batch the command saw
released: of two operators promoting at once, one releases the next batch
and the other is told it was released meanwhile; never two batches.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withJetStream(cmd, g, &store, func(ctx context.Context, js jetstream.JetStream) error {
				p, err := rollout.PromoteNext(ctx, js, args[0], whoAmI(), time.Now())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: batch %d of %d released (%d VMs)\n", p.EventID, p.Batch+1, len(p.Batches), p.Batches[p.Batch])
				return nil
			})
		},
	}
	store.bind(cmd)
	cmd.ValidArgsFunction = store.completeEventIDs
	return cmd
}

func rolloutActionCmd(g *globals, action events.ControlAction) *cobra.Command {
	var store storeFlags
	var reason string
	var ahead, force bool
	cmd := &cobra.Command{
		Use: string(action) + " EVENT-ID",
		Short: map[events.ControlAction]string{
			events.ActionPause:  "Hold an event's plans: no more VMs move until resume",
			events.ActionResume: "Send a paused event's held plans back to the applier",
			events.ActionAbort:  "Stop an event's rollout for good: VMs not yet moved are skipped",
		}[action],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withJetStream(cmd, g, &store, func(ctx context.Context, js jetstream.JetStream) error {
				return steer(ctx, cmd.OutOrStdout(), js, rollout.Steering{
					EventID: args[0], Action: action, Reason: reason, By: whoAmI(), Ahead: ahead, Force: force,
				})
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the change and in skipped VMs' outcomes")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite the event's control record even when it no longer decodes or the rollout has finished")
	if action != events.ActionResume {
		cmd.Flags().BoolVar(&ahead, "ahead", false, "the event has not been planned yet: "+string(action)+" it ahead, as soon as it arrives")
	}
	store.bind(cmd)
	cmd.ValidArgsFunction = store.completeEventIDs
	return cmd
}

// steer applies the steering and says what became of the rollout.
func steer(ctx context.Context, out io.Writer, js jetstream.JetStream, s rollout.Steering) error {
	done, err := rollout.Steer(ctx, js, s, time.Now())
	switch {
	case errors.Is(err, rollout.ErrBadEventID):
		return fmt.Errorf("%w: %w", errUsage, err)
	case err != nil:
		return err
	case !done.Changed:
		fmt.Fprintf(out, "%s is already %s\n", done.EventID, done.Control.State)
	default:
		fmt.Fprintf(out, "%s %s\n", done.EventID, done.Control.State)
	}
	return nil
}

func rolloutStatusCmd(g *globals) *cobra.Command {
	var store storeFlags
	var output printer.Format
	var watch bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status EVENT-ID [--watch]",
		Short: "Show an event's rollout: its state, planned VMs, outcomes by result and held plans",
		Long: `status shows where an event's rollout stands. With --watch it follows the
rollout, printing a progress line each time it changes, until it is done
(complete, incomplete or aborted with nothing left in flight), --timeout
passes or Ctrl-C; the rollout itself goes on either way.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch && timeout <= 0 {
				return fmt.Errorf("%w: --timeout %s: want a positive duration", errUsage, timeout)
			}
			return withJetStream(cmd, g, &store, func(ctx context.Context, js jetstream.JetStream) error {
				a, err := inspect.NewReader(js).Status(ctx, args[0])
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if err := inspect.WriteStatus(out, a, output); err != nil || !watch || a.Done() {
					return err
				}
				return watchStatus(ctx, js, a, timeout, out)
			})
		},
	}
	printer.AddFlag(cmd, &output, printer.Formats...)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout until it is done, a line per change")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "with --watch, how long to follow before giving up (the rollout goes on)")
	store.bind(cmd)
	cmd.ValidArgsFunction = store.completeEventIDs
	return cmd
}

// watchEvery is how often `rollout status --watch` reads the rollout again.
const watchEvery = 2 * time.Second

// watchStatus prints a progress line whenever the rollout's account
// changes, until it is done, the timeout passes or ctx ends; the last two
// say the rollout goes on.
func watchStatus(ctx context.Context, js jetstream.JetStream, a rollout.Account, timeout time.Duration, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	a, err := rollout.WatchAccount(ctx, js, a, watchEvery, func(a rollout.Account) {
		if line := inspect.ProgressLine(a); line != last {
			fmt.Fprintf(w, "%s  %s\n", time.Now().Format(time.TimeOnly), line)
			last = line
		}
	})
	if err == nil || ctx.Err() == nil {
		return err
	}
	why := "interrupted"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		why = "--timeout " + timeout.String() + " passed"
	}
	return fmt.Errorf("stopped watching (%s) with %d of %d VMs settled: rollout %s goes on", why, a.Settled(), a.Planned, a.EventID)
}

// whoAmI names the operator in control records: user@host.
func whoAmI() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil {
		return name + "@" + host
	}
	return name
}
