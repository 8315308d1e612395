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
	"kvlive/internal/kube"
	"kvlive/internal/printer"
	"kvlive/internal/telemetry"
	"kvlive/readmodel/inspect"
	"kvlive/readmodel/replay"
	"kvlive/rollout"
)

func newRolloutCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Pause, resume, abort, retry or undo an event's rollout, or show where it stands",
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
running, paused, aborted, verifying (every VM has an outcome, KubeVirt's
verdict on some moved VM is still awaited), complete, or incomplete with
how many VMs are unaccounted for and since when; then KubeVirt's verdicts on
the VMs moved, and how many differ from kvlive's prediction. verify looks
again at the VMs whose verdict was pending, refused or not observed, and
records what KubeVirt shows now beside the verdict. undo moves every VM a
finished rollout moved back where it was, as a rollout of its own.`,
		Example: `  kvlive rollout pause VirtualMachineClusterInstancetype/2f6c…/5 --reason "checking the first VMs"
  kvlive rollout status VirtualMachineClusterInstancetype/2f6c…/5
  kvlive rollout resume VirtualMachineClusterInstancetype/2f6c…/5
  kvlive rollout abort switch/0b5c… --reason "wrong target"`,
	}
	for _, action := range []events.ControlAction{events.ActionPause, events.ActionResume, events.ActionAbort} {
		cmd.AddCommand(rolloutActionCmd(g, action))
	}
	cmd.AddCommand(rolloutStatusCmd(g), rolloutPromoteCmd(g), rolloutRetryCmd(g), rolloutVerifyCmd(g), rolloutUndoCmd(g))
	return cmd
}

// clusterRolloutOptions are the flags and argument of the rollout commands
// that read both kvlive's records and the cluster (retry, verify, undo):
// the store's flags, the kubeconfig's and the event id.
type clusterRolloutOptions struct {
	storeOptions
	kube    *kubeFlags
	id      string
	clients kube.Clients
}

func newClusterRolloutOptions(g *globals) clusterRolloutOptions {
	return clusterRolloutOptions{storeOptions: newStoreOptions(g), kube: newKubeFlags()}
}

// bind adds the kubeconfig's and the store's flags, and completes the
// event id from the store.
func (o *clusterRolloutOptions) bind(cmd *cobra.Command) {
	o.kube.addFlags(cmd.Flags(), "")
	o.store.bind(cmd)
	cmd.ValidArgsFunction = o.store.completeEventIDs
}

// Complete takes the id and the clients of the kubeconfig the flags name.
func (o *clusterRolloutOptions) Complete(cmd *cobra.Command, args []string) error {
	o.complete(cmd)
	o.id = args[0]
	var err error
	o.clients, err = o.kube.clients()
	return err
}

// rolloutRetryOptions are kvlive rollout retry's flags and argument.
type rolloutRetryOptions struct{ clusterRolloutOptions }

func rolloutRetryCmd(g *globals) *cobra.Command {
	o := &rolloutRetryOptions{newClusterRolloutOptions(g)}
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
		RunE: runE(o),
	}
	o.bind(cmd)
	return cmd
}

func (o *rolloutRetryOptions) Validate() error { return nil }

// Run retries the rollout's failed VMs.
func (o *rolloutRetryOptions) Run(ctx context.Context) error {
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		return retryRollout(ctx, o.out, js, o.clients, o.id)
	})
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

// rolloutPromoteOptions are kvlive rollout promote's flags and argument.
type rolloutPromoteOptions struct {
	storeOptions
	id    string
	batch int
}

func rolloutPromoteCmd(g *globals) *cobra.Command {
	o := &rolloutPromoteOptions{storeOptions: newStoreOptions(g)}
	cmd := &cobra.Command{
		Use:   "promote EVENT-ID",
		Short: "Release a batched rollout's next batch now, skipping its gate and pause (and a paused canary)",
		Long: `promote releases the batch after the last released one at once, whatever the
gate of the released batch says and however long the policy's pause has to
run, and resumes the rollout if it was paused (a pause: manual waits for
this). The decision is a compare-and-set on the batch before the one
released: of two operators promoting at once, one releases the next batch
and the other is told it was released meanwhile; never two batches. A batch
a promote released stops further promotes until it passes its gate, so a
second promote a moment after the first is refused too; to release the
batch after it anyway, name it with --batch.`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	cmd.Flags().IntVar(&o.batch, "batch", 0, "the batch to release, counted from 1 (the one after the last released; default: that one, unless a promote released the last and it has not passed its gate)")
	o.store.bind(cmd)
	cmd.ValidArgsFunction = o.store.completeEventIDs
	return cmd
}

func (o *rolloutPromoteOptions) Complete(cmd *cobra.Command, args []string) error {
	o.complete(cmd)
	o.id = args[0]
	return nil
}

func (o *rolloutPromoteOptions) Validate() error {
	if o.batch < 0 || o.batch == 1 {
		return fmt.Errorf("%w: --batch %d: batches 2 and later are promoted (batch 1 goes first by itself)", errUsage, o.batch)
	}
	return nil
}

// Run releases the next batch and says which.
func (o *rolloutPromoteOptions) Run(ctx context.Context) error {
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		p, err := rollout.PromoteNext(ctx, js, o.id, o.batch, whoAmI(), time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(o.out, "%s: batch %d of %d released (%d VMs)\n", p.EventID, p.Batch+1, len(p.Batches), p.Batches[p.Batch])
		return nil
	})
}

// rolloutActionOptions are the flags and argument of kvlive rollout pause,
// resume and abort.
type rolloutActionOptions struct {
	storeOptions
	steering rollout.Steering
}

func rolloutActionCmd(g *globals, action events.ControlAction) *cobra.Command {
	o := &rolloutActionOptions{storeOptions: newStoreOptions(g), steering: rollout.Steering{Action: action}}
	cmd := &cobra.Command{
		Use: string(action) + " EVENT-ID",
		Short: map[events.ControlAction]string{
			events.ActionPause:  "Hold an event's plans: no more VMs move until resume",
			events.ActionResume: "Send a paused event's held plans back to the applier",
			events.ActionAbort:  "Stop an event's rollout for good: VMs not yet moved are skipped",
		}[action],
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	s := &o.steering
	cmd.Flags().StringVar(&s.Reason, "reason", "", "why, recorded with the change and in skipped VMs' outcomes")
	cmd.Flags().BoolVar(&s.Force, "force", false, "overwrite the event's control record even when it no longer decodes or the rollout has finished")
	if action != events.ActionResume {
		cmd.Flags().BoolVar(&s.Ahead, "ahead", false, "the event has not been planned yet: "+string(action)+" it ahead, as soon as it arrives")
	}
	o.store.bind(cmd)
	cmd.ValidArgsFunction = o.store.completeEventIDs
	return cmd
}

// Complete takes the id and names the operator.
func (o *rolloutActionOptions) Complete(cmd *cobra.Command, args []string) error {
	o.complete(cmd)
	o.steering.EventID, o.steering.By = args[0], whoAmI()
	return nil
}

func (o *rolloutActionOptions) Validate() error { return nil }

// Run steers the rollout and says what became of it.
func (o *rolloutActionOptions) Run(ctx context.Context) error {
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		done, err := rollout.Steer(ctx, js, o.steering, time.Now())
		switch {
		case errors.Is(err, rollout.ErrBadEventID):
			return fmt.Errorf("%w: %w", errUsage, err)
		case err != nil:
			return err
		case !done.Changed:
			fmt.Fprintf(o.out, "%s is already %s\n", done.EventID, done.Control.State)
		default:
			fmt.Fprintf(o.out, "%s %s\n", done.EventID, done.Control.State)
		}
		return nil
	})
}

// rolloutStatusOptions are kvlive rollout status's flags and argument.
type rolloutStatusOptions struct {
	storeOptions
	output  printer.Format
	watch   bool
	timeout time.Duration
	id      string
}

func rolloutStatusCmd(g *globals) *cobra.Command {
	o := &rolloutStatusOptions{storeOptions: newStoreOptions(g)}
	cmd := &cobra.Command{
		Use:   "status EVENT-ID [--watch]",
		Short: "Show an event's rollout: its state, planned VMs, outcomes by result and held plans",
		Long: `status shows where an event's rollout stands. With --watch it follows the
rollout, printing a progress line each time it changes, until it is done
(complete, incomplete or aborted with nothing left in flight), --timeout
passes or Ctrl-C; the rollout itself goes on either way.`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "follow the rollout until it is done, a line per change")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Minute, "with --watch, how long to follow before giving up (the rollout goes on)")
	o.store.bind(cmd)
	cmd.ValidArgsFunction = o.store.completeEventIDs
	return cmd
}

func (o *rolloutStatusOptions) Complete(cmd *cobra.Command, args []string) error {
	o.complete(cmd)
	o.id = args[0]
	return nil
}

// Validate wants a --timeout to watch for.
func (o *rolloutStatusOptions) Validate() error {
	if o.watch && o.timeout <= 0 {
		return fmt.Errorf("%w: --timeout %s: want a positive duration", errUsage, o.timeout)
	}
	return nil
}

// Run shows the rollout's status and, with --watch, follows it.
func (o *rolloutStatusOptions) Run(ctx context.Context) error {
	return o.store.with(ctx, o.log, func(ctx context.Context, js jetstream.JetStream) error {
		a, err := inspect.NewReader(js).Status(ctx, o.id)
		if err != nil {
			return err
		}
		if err := inspect.WriteStatus(o.out, a, o.output); err != nil || !o.watch || a.Done() {
			return err
		}
		return watchStatus(ctx, js, a, o.timeout, o.out)
	})
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
