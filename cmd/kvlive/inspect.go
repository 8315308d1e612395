package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/internal/printer"
	"kvlive/readmodel/inspect"
	"kvlive/rollout"
)

// storeFlags say where the inspection commands read kvlive's records: the
// NATS server kvlive run listens on, or a JetStream store directory opened
// in-process (what kvlive demo --data-dir leaves behind).
type storeFlags struct {
	url     string
	dataDir string
	auth    natsAuthFlags
	// bound is how long a read of the store rides out a NATS leader
	// election: --request-timeout, shared with the kubeconfig flags where
	// a command has both.
	bound time.Duration
}

func (s *storeFlags) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.url, "nats-url", "nats://127.0.0.1:4222", "NATS server kvlive run uses")
	f.StringVar(&s.dataDir, "data-dir", "", "open this JetStream store in-process instead of --nats-url, e.g. after kvlive demo --data-dir DIR "+
		"(never while a kvlive process is using it)")
	cmd.MarkFlagsMutuallyExclusive("nats-url", "data-dir")
	s.auth.bind(f)
	if f.Lookup(requestTimeoutFlag) == nil {
		f.String(requestTimeoutFlag, "0", "how long a read of kvlive's store may wait for NATS, riding out a leader election "+
			"(a number with a unit, e.g. 1s or 2m; 0 means "+bus.ReadBound.String()+")")
	}
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		var err error
		if s.bound, err = readBound(cmd.Flags()); err != nil {
			return err
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

// completionTimeout bounds how long completing an event id may take.
const completionTimeout = 3 * time.Second

// completeEventIDs completes an event id (the first argument, or a flag's
// value) from the store the command's flags name; a store it cannot reach
// in completionTimeout completes nothing.
func (s *storeFlags) completeEventIDs(cmd *cobra.Command, args []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if cmd.ValidArgsFunction != nil && len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	b, err := s.open(slog.New(slog.DiscardHandler), completionTimeout)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	defer func() { _ = b.Close() }()
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	ids, err := rollout.EventIDs(ctx, b.JetStream, typed)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// requestTimeoutFlag is kubectl's --request-timeout, which bounds the
// store's reads too.
const requestTimeoutFlag = "request-timeout"

// readBound is --request-timeout as a bound on the store's reads: kubectl's
// format (a bare number is seconds), 0 for bus.ReadBound.
func readBound(f *pflag.FlagSet) (time.Duration, error) {
	flag := f.Lookup(requestTimeoutFlag)
	if flag == nil {
		return bus.ReadBound, nil
	}
	v := flag.Value.String()
	if n, err := strconv.Atoi(v); err == nil {
		v = strconv.Itoa(n) + "s"
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%w: --%s %q: want a duration such as 1s, 2m or 3h", errUsage, requestTimeoutFlag, flag.Value.String())
	}
	if d == 0 {
		d = bus.ReadBound
	}
	return d, nil
}

// with opens the store, runs fn on it and closes the store again.
func (s *storeFlags) with(ctx context.Context, log *slog.Logger, fn func(context.Context, jetstream.JetStream) error) (err error) {
	b, err := s.open(log, s.bound)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	return fn(ctx, b.JetStream)
}

// withReader is with for the inspection commands.
func (s *storeFlags) withReader(ctx context.Context, log *slog.Logger, fn func(context.Context, *inspect.Reader) error) error {
	return s.with(ctx, log, func(ctx context.Context, js jetstream.JetStream) error {
		return fn(ctx, inspect.NewReader(js))
	})
}

// storeOptions are what every command that reads kvlive's store completes
// the same way: the store's flags, the logger and the standard streams.
type storeOptions struct {
	g     *globals
	store storeFlags
	log   *slog.Logger
	streams
}

func newStoreOptions(g *globals) storeOptions { return storeOptions{g: g} }

// complete takes the streams and the logger --log-level asks for.
func (s *storeOptions) complete(cmd *cobra.Command) {
	s.take(cmd)
	s.log = s.g.logger()
}

// open reaches --nats-url, or the store under --data-dir: through the
// server of the process holding it, else by starting a server of this
// process's own on it that does not listen. Reads are bounded by bound.
func (s *storeFlags) open(log *slog.Logger, bound time.Duration) (*bus.Opened, error) {
	auth, err := s.auth.options()
	if err != nil {
		return nil, err
	}
	o := bus.OpenOptions{Name: "kvlive-inspect", Log: log, Auth: auth, ReadBound: bound}
	if s.dataDir == "" {
		o.URL = s.url
		b, err := bus.Open(o)
		if err != nil {
			return nil, fmt.Errorf("%w (is kvlive run up? after kvlive demo --data-dir DIR, pass --data-dir DIR)", err)
		}
		return b, nil
	}
	// A process serving the store: reach its server rather than open the
	// files under it (with the credentials given, should kvlive run's
	// --listen-config require them).
	if h, held := bus.StoreHolder(s.dataDir); held {
		if h.URL == "" {
			return nil, fmt.Errorf("--data-dir %s: %w by %s (pid %d), which serves it to no other process; "+
				"read it once that has finished", s.dataDir, bus.ErrStoreInUse, h.Command, h.PID)
		}
		o.URL = h.URL
		b, err := bus.Open(o)
		if err != nil {
			return nil, fmt.Errorf("--data-dir %s is served by %s (pid %d) at %s: %w", s.dataDir, h.Command, h.PID, h.URL, err)
		}
		return b, nil
	}
	// The server would make an empty store where none is: say so instead.
	if !bus.HasJetStream(s.dataDir) {
		return nil, fmt.Errorf("--data-dir %s holds no JetStream store", s.dataDir)
	}
	o.DataDir, o.DontListen, o.Command = s.dataDir, true, "kvlive (reading)"
	return bus.Open(o)
}

// outcomesOptions are kvlive outcomes' flags.
type outcomesOptions struct {
	storeOptions
	eventID, vm, result string
	differs             bool
	output              printer.Format
	filter              inspect.OutcomeFilter
}

func newOutcomesCmd(g *globals) *cobra.Command {
	o := &outcomesOptions{storeOptions: newStoreOptions(g)}
	cmd := &cobra.Command{
		Use:   "outcomes [--event ID] [--vm NS/NAME] [--result RESULT] [--differs]",
		Short: "List what happened to each VM: the latest attempt's outcome per event and VM",
		Long: `outcomes reads the outcomes the applier recorded and shows, per event and VM,
the latest attempt: what kvlive predicted (live, restart, next-boot, none, skip
or failed), what KubeVirt did (the verdict the verifier stored from the VM and
VMI: live, restart, next-boot, pending, refused, not-observed; "awaited" until
then), whether it wrote to the cluster, its trace id and its reason or error,
then a count per result and per verdict. -o wide adds KubeVirt's own condition
and message; --differs shows only the VMs where prediction and verdict differ.
kvlive events lists the event ids.`,
		Example: `  kvlive outcomes --result failed
  kvlive outcomes --differs -o wide
  kvlive outcomes --vm shop/web-1 -o json
  kvlive outcomes --event switch/0b5c… --data-dir /tmp/kvlive-demo`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.eventID, "event", "", "only this event's outcomes")
	f.StringVar(&o.vm, "vm", "", "only this VM's outcomes, as NAMESPACE/NAME")
	f.StringVar(&o.result, "result", "", "only VMs whose latest result is this: live, restart, next-boot, none, skip or failed")
	f.BoolVar(&o.differs, "differs", false, "only VMs whose verdict (what KubeVirt did) differs from kvlive's prediction")
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	o.store.bind(cmd)
	_ = cmd.RegisterFlagCompletionFunc("event", o.store.completeEventIDs)
	return cmd
}

// Complete reads --event, --vm and --result into the filter.
func (o *outcomesOptions) Complete(cmd *cobra.Command, _ []string) (err error) {
	o.complete(cmd)
	o.filter, err = outcomeFilter(o.eventID, o.vm, o.result)
	o.filter.Differs = o.differs
	return err
}

func (o *outcomesOptions) Validate() error { return nil }

// Run lists the outcomes the flags select.
func (o *outcomesOptions) Run(ctx context.Context) error {
	return o.store.withReader(ctx, o.log, func(ctx context.Context, r *inspect.Reader) error {
		rows, err := r.OutcomeRows(ctx, o.filter)
		if err != nil {
			return err
		}
		return inspect.WriteOutcomes(o.out, rows, o.output, printer.Width(o.out))
	})
}

func outcomeFilter(eventID, vm, result string) (inspect.OutcomeFilter, error) {
	f := inspect.OutcomeFilter{EventID: eventID, Result: events.Result(result)}
	if vm != "" {
		ns, name, ok := strings.Cut(vm, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return f, fmt.Errorf("%w: --vm %q: want NAMESPACE/NAME", errUsage, vm)
		}
		f.Namespace, f.Name = ns, name
	}
	if result != "" && !slices.Contains(events.Results, f.Result) {
		return f, fmt.Errorf("%w: --result %q: want one of %v", errUsage, result, events.Results)
	}
	return f, nil
}

func newRolloutsCmd(g *globals) *cobra.Command {
	return newEventListCmd(g, eventList{
		use:   "rollouts",
		short: "List rollouts, newest first, with their state, progress and batch",
		long: `rollouts lists the most recent events' rollouts, newest first: the state
(pending, running, paused, aborted, verifying, complete, incomplete), how many
planned VMs have settled, the batch a batched rollout is at, the outcomes so
far and KubeVirt's verdicts on the VMs moved.
kvlive rollout status ID shows one in full.`,
		noun:  "rollouts",
		write: inspect.Listing.WriteRollouts,
	})
}

func newEventsCmd(g *globals) *cobra.Command {
	return newEventListCmd(g, eventList{
		use:   "events",
		short: "List recent instance type changes and switches, with planned and recorded results",
		long: `events lists the most recent events, newest last: the id (for kvlive outcomes
--event and kvlive trace), when it happened, what changed (or what a switch
moves VMs from and to), the generation, how many VMs the planner planned per
result, and how many outcomes per result have been recorded so far.`,
		example: `  kvlive events
  kvlive events --limit 5 -o json`,
		noun:  "events",
		write: inspect.Listing.WriteEvents,
	})
}

// eventList is one of the commands that list the newest events: how it is
// described and how it prints them.
type eventList struct {
	use, short, long, example, noun string
	write                           func(inspect.Listing, io.Writer, []inspect.EventSummary) error
}

// eventListOptions are the flags of a command that lists the newest events.
type eventListOptions struct {
	storeOptions
	list   eventList
	limit  int
	output printer.Format
}

func newEventListCmd(g *globals, l eventList) *cobra.Command {
	o := &eventListOptions{storeOptions: newStoreOptions(g), list: l}
	cmd := &cobra.Command{
		Use:     l.use + " [--limit N]",
		Short:   l.short,
		Long:    l.long,
		Example: l.example,
		Args:    cobra.NoArgs,
		RunE:    runE(o),
	}
	cmd.Flags().IntVar(&o.limit, "limit", 20, "how many of the newest "+l.noun+" to list; 0 lists all")
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	o.store.bind(cmd)
	return cmd
}

func (o *eventListOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.complete(cmd)
	return nil
}

func (o *eventListOptions) Validate() error { return nil }

// Run lists the newest --limit events.
func (o *eventListOptions) Run(ctx context.Context) error {
	return o.store.withReader(ctx, o.log, func(ctx context.Context, r *inspect.Reader) error {
		list, err := r.Events(ctx, o.limit)
		if err != nil {
			return err
		}
		return o.list.write(inspect.Listing{Format: o.output, Width: printer.Width(o.out), Now: time.Now()}, o.out, list)
	})
}

// traceOptions are kvlive trace's flags.
type traceOptions struct {
	storeOptions
	color    string
	output   printer.Format
	maxDepth int
	id       string
	colour   bool
}

func newTraceCmd(g *globals) *cobra.Command {
	o := &traceOptions{storeOptions: newStoreOptions(g)}
	cmd := &cobra.Command{
		Use:   "trace EVENT-ID|TRACE-ID",
		Short: "Draw an event's trace as a waterfall: watcher, planner and every VM's apply span",
		Long: `trace reads the spans kvlive stored for an event's trace (an event id is
resolved through its rollout record; 32 hex digits are a trace id) and draws
them as a tree with a time bar per span. Per-VM spans that root their own trace
and link to the plan span are drawn under it, marked ↪. Results are coloured on
a terminal unless NO_COLOR is set; --color overrides both. The waterfall fits
the terminal (names cut with …); -o wide draws every name whole; -o json and
-o yaml list the spans in tree order.`,
		Example: `  kvlive trace VirtualMachineClusterInstancetype/6f1c…/2
  kvlive trace 4bf92f3577b34da6a3ce929d0e0e4736 --max-depth 2
  kvlive trace switch/0b5c… -o json`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	f := cmd.Flags()
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	f.StringVar(&o.color, "color", inspect.ColorAuto, "colour the waterfall: auto (a terminal, without NO_COLOR), always or never")
	f.IntVar(&o.maxDepth, "max-depth", 0, "draw this many levels of the tree; 0 draws all")
	o.store.bind(cmd)
	cmd.ValidArgsFunction = o.store.completeEventIDs
	return cmd
}

// Complete takes the id (an event id or a trace id) and decides, from
// --color, the terminal and NO_COLOR, whether to colour.
func (o *traceOptions) Complete(cmd *cobra.Command, args []string) (err error) {
	o.complete(cmd)
	o.id = args[0]
	if o.colour, err = inspect.UseColor(o.color, printer.IsTerminal(o.out), os.Getenv("NO_COLOR")); err != nil {
		return fmt.Errorf("%w: --color: %w", errUsage, err)
	}
	return nil
}

func (o *traceOptions) Validate() error { return nil }

// Run draws the trace.
func (o *traceOptions) Run(ctx context.Context) error {
	return o.store.withReader(ctx, o.log, func(ctx context.Context, r *inspect.Reader) error {
		traceID, err := r.ResolveTrace(ctx, o.id)
		if err != nil {
			return err
		}
		spans, err := r.Spans(ctx, traceID)
		if err != nil {
			return err
		}
		tree := inspect.NewTree(traceID, spans)
		if !o.output.Human() {
			return tree.WriteData(o.out, o.output)
		}
		return tree.Render(o.out, inspect.WaterfallOptions{Color: o.colour, MaxDepth: o.maxDepth,
			Width: printer.Width(o.out), Whole: o.output == printer.FormatWide})
	})
}
