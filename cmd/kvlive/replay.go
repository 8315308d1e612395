package main

import (
	"context"
	"errors"
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
)

// replayOptions are kvlive replay's flags.
type replayOptions struct {
	storeOptions
	kube     *kubeFlags
	eventID  string
	since    string
	fromSeq  uint64
	toSeq    uint64
	object   string
	apply    bool
	wait     bool
	output   printer.Format
	selected replay.Selection
}

func newReplayCmd(g *globals) *cobra.Command {
	o := &replayOptions{storeOptions: newStoreOptions(g), kube: newKubeFlags()}
	cmd := &cobra.Command{
		Use:   "replay [--event ID | --since DURATION|TIME | --from-seq N [--to-seq M] | --instancetype KIND/[NS/]NAME] [--apply]",
		Short: "Replay past events: show what they would do today, or send them through the pipeline again",
		Long: `replay selects events kept in the KVLIVE_EVENTS stream (the replay horizon is
the stream's --max-age) and, by default, prints the plan each would produce
today, as kvlive plan does; nothing is written. With --apply each is published
again as a new event (a new id, a Kvlive-Replay-Of header, a trace linked to
the original's) that the running pipeline carries out like any other: VMs
already at the target are "none", and a change superseded by a newer
generation replays as the newest.`,
		Example: `  kvlive replay --since 2h
  kvlive replay --event VirtualMachineClusterInstancetype/3c3c…/5 --apply --wait`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.eventID, "event", "", "replay the event with this id")
	f.StringVar(&o.since, "since", "", "replay events stored since a duration ago (2h) or a time (RFC 3339)")
	f.Uint64Var(&o.fromSeq, "from-seq", 0, "first stream sequence to replay")
	f.Uint64Var(&o.toSeq, "to-seq", 0, "last stream sequence to replay (default: the end)")
	f.StringVar(&o.object, "instancetype", "", "replay events of this KIND/[NS/]NAME (changes of it, switches from or to it)")
	f.BoolVar(&o.apply, "apply", false, "publish the events again instead of showing their plans")
	f.BoolVar(&o.wait, "wait", false, "with --apply, wait for every VM's outcome")
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	o.kube.addFlags(f, "")
	o.store.bind(cmd)
	_ = cmd.RegisterFlagCompletionFunc("event", o.store.completeEventIDs)
	return cmd
}

// Complete reads --since and --instancetype into the selection.
func (o *replayOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.complete(cmd)
	return o.selection()
}

// Validate wants a selection.
func (o *replayOptions) Validate() error {
	if o.selected == (replay.Selection{}) {
		return fmt.Errorf("%w: select events with --event, --since, --from-seq or --instancetype", errUsage)
	}
	return nil
}

// Run shows the selected events' plans today, or with --apply publishes
// them again.
func (o *replayOptions) Run(ctx context.Context) error {
	clients, err := o.kube.clients()
	if err != nil {
		return err
	}
	b, err := o.store.open(o.log, o.store.bound)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	js := b.JetStream
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stored, err := replay.Select(ctx, js, o.selected)
	if err != nil {
		return err
	}
	if len(stored) == 0 {
		return errors.New("no stored event matches the selection (the events of rollouts settled longer than --max-age ago are gone)")
	}
	f, stop, err := kube.StartCache(ctx, clients, "", kube.DefaultSyncTimeout)
	if err != nil {
		return err
	}
	defer stop()
	if !o.apply {
		previews, err := offline.DryRun(f, stored)
		if err != nil {
			return err
		}
		return printPreviews(o.out, previews, o.output)
	}
	return o.publish(ctx, o.out, js, f, stored)
}

// selection reads the selection flags.
func (o *replayOptions) selection() error {
	o.selected = replay.Selection{EventID: o.eventID, FromSeq: o.fromSeq, ToSeq: o.toSeq}
	if o.since != "" {
		if d, err := time.ParseDuration(o.since); err == nil {
			o.selected.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, o.since); err == nil {
			o.selected.Since = t
		} else {
			return fmt.Errorf("%w: --since %q: want a duration (2h) or an RFC 3339 time", errUsage, o.since)
		}
	}
	if o.object != "" {
		ref, err := events.ParseRef(o.object, "")
		if err != nil {
			return fmt.Errorf("%w: --instancetype: %w", errUsage, err)
		}
		o.selected.Object = &ref
	}
	return nil
}

func (o *replayOptions) publish(ctx context.Context, out io.Writer, js jetstream.JetStream, f *kube.Cache, stored []replay.Stored) error {
	tp, err := telemetry.Setup(ctx, "kvlive-replay", js)
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	replayed, err := replay.Publisher{JetStream: js, Fleet: f, Tracer: tp}.Apply(ctx, stored)
	for _, r := range replayed {
		line := fmt.Sprintf("replayed %s as %s", r.Original, r.EventID)
		if r.Note != "" {
			line += " (" + r.Note + ")"
		}
		fmt.Fprintln(out, line)
	}
	if err != nil || !o.wait {
		return err
	}
	for _, r := range replayed {
		p, err := rollout.Follow(ctx, js, r.EventID, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %d VMs %v\n", r.EventID, len(p.Outcomes), p.Counts())
	}
	return nil
}

// previewJSON is one replayed event's dry run in -o json/yaml.
type previewJSON struct {
	EventID string    `json:"eventId"`
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Note    string    `json:"note,omitempty"`
	Plan    any       `json:"plan"`
}

func printPreviews(w io.Writer, previews []offline.Preview, f printer.Format) error {
	if !f.Human() {
		list := make([]previewJSON, 0, len(previews))
		for _, p := range previews {
			list = append(list, previewJSON{EventID: p.Event.ID, Seq: p.Event.Seq, Time: p.Event.Time, Note: p.Note, Plan: p.Report})
		}
		return printer.WriteData(w, f, list)
	}
	width := printer.Width(w)
	for i, p := range previews {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "# event %s (seq %d, %s)\n", p.Event.ID, p.Event.Seq, p.Event.Time.Format(time.RFC3339))
		if p.Note != "" {
			fmt.Fprintf(w, "# %s\n", p.Note)
		}
		if err := p.Report.Print(w, f, width); err != nil {
			return err
		}
	}
	return nil
}
