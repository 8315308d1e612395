// Package pipeline is the process wiring: kvlive's stages (and, for the demo
// and tests, the virt-controller stand-in) in one process over one informer
// cache, started, synced and shut down together. `kvlive run`, the demo and
// the tests start it.
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/record"

	"kvlive/applier"
	"kvlive/drift"
	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/standin"
	"kvlive/internal/telemetry"
	"kvlive/internal/webhook"
	"kvlive/planner"
	"kvlive/planner/preview"
	"kvlive/pruner"
	"kvlive/rollout"
	"kvlive/watcher"
)

// Stage names, as --stages takes them.
const (
	StageWatcher = "watcher"
	StagePlanner = "planner"
	StageApplier = "applier"
)

// AllStages lists every stage.
var AllStages = []string{StageWatcher, StagePlanner, StageApplier}

// queuePruner is the revision pruner's kvlive_queue_depth label: the VMs
// it has still to look at (pruner.Pruner.Backlog); 0 where no pruner runs
// (no watcher stage, a replica not leading, pruning off).
const queuePruner = "pruner"

// Config says what to run and with what.
type Config struct {
	Clients   kube.Clients
	JetStream jetstream.JetStream
	// Namespace limits namespaced objects and VMs; "" means all.
	Namespace string
	Stages    []string
	Log       *slog.Logger
	Tracer    trace.TracerProvider
	// ApplierWorkers, PlannerWorkers and Rate tune the stages.
	ApplierWorkers int
	PlannerWorkers int
	Rate           float64
	// StandIn also runs the virt-controller stand-in (demo and tests only,
	// over in-memory clients), whose live migrations each take
	// StandInMigration and keep a migration object each, made final
	// StandInFinalizeLag after the VMI shows the end; StandInStarted, when
	// set, is given the stand-in once built (the demo reads how many
	// migrations it ran).
	StandIn            bool
	StandInMigration   time.Duration
	StandInFinalizeLag time.Duration
	StandInStarted     func(*standin.Controller)
	// ObserveTimeout and TraceFanout tune tracing (see applier.Config and planner.Config).
	ObserveTimeout time.Duration
	TraceFanout    int
	// QueueTimeout is how long a moved VM may wait for its migration to
	// start (see applier.Config).
	QueueTimeout time.Duration
	// SlotReactions is how long a moved VM that shows no hot-plug keeps
	// its migration budget slot (see applier.Config; zero: the default).
	SlotReactions time.Duration
	// Policy is the rollout policy of events that name none.
	Policy events.Policy
	// Horizon is the replay horizon (--max-age): with the planner, this
	// replica ages records out with it once their rollout settled
	// (rollout.Keeper). Zero keeps them.
	Horizon time.Duration
	Metrics *telemetry.Metrics
	// RevisionRetention, when set, runs the revision pruner beside the
	// watcher (pruner.Config.Retention; negative turns it off).
	RevisionRetention *int
	// LeaderElection, when set, runs the watcher (and the pruner) only
	// while this replica holds the Lease it names.
	LeaderElection *LeaderElection
	// SyncTimeout bounds the wait for the informer caches' first list; zero
	// waits until the context ends.
	SyncTimeout time.Duration
	// ShutdownGrace is how long events being planned and VMs being moved
	// may finish once the context ends; zero means DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Webhooks calls the confirm and check webhooks of rollout policies.
	Webhooks *webhook.Client

	// moving is this process's applier's activity, which its revision
	// pruner waits on; Start sets it.
	moving *applier.Activity
	// verifier is where addApplier leaves this process's verifier, for
	// Running.Settling; Start sets it.
	verifier *atomic.Pointer[rollout.Verifier]
	// pruner is where runWatcher leaves the revision pruner of this
	// process's watcher term, for Running.Settling; Start sets it.
	pruner *atomic.Pointer[pruner.Pruner]
	// settled is set each time this process's keeper marks a rollout
	// settled, for Running.RolloutSettled; Start sets it.
	settled *atomic.Bool
}

// DefaultShutdownGrace lets in-flight writes finish on SIGTERM well within
// Kubernetes' default 30s termination grace period.
const DefaultShutdownGrace = 10 * time.Second

// Running is a started pipeline.
type Running struct {
	group    *errgroup.Group
	cancel   context.CancelFunc
	watcher  atomic.Pointer[watcher.Watcher]
	verifier atomic.Pointer[rollout.Verifier]
	pruner   atomic.Pointer[pruner.Pruner]
	moving   *applier.Activity
	fleet    *kube.Cache
	settled  atomic.Bool
}

// Drift measures drift per instance type and preference from the
// pipeline's informer cache (counts only), nothing before it synced.
func (r *Running) Drift() []drift.Row {
	if !r.fleet.HasSynced() {
		return nil
	}
	return drift.Measure(r.fleet, drift.Filter{CountsOnly: true})
}

// Moving reports whether this process's applier is moving VMs (a plan in
// hand, or one let go less than two seconds ago).
func (r *Running) Moving() bool { return r.moving.Busy(time.Now()) }

// Settling reports whether this process is still busy with what a
// rollout left: its verifier awaits a verdict (on a VM this replica or
// another moved: they share the verifier's consumer), or its revision
// pruner has VMs to look at. Both come after a rollout's last move: the
// verdicts as KubeVirt gives them, the pruning once the applier is idle.
func (r *Running) Settling() bool {
	if v := r.verifier.Load(); v != nil && v.Awaited() > 0 {
		return true
	}
	p := r.pruner.Load()
	return p != nil && p.Backlog() > 0
}

// RolloutSettled reports whether this process's keeper marked a rollout
// settled since the last call. To mark a finished rollout, the keeper
// reads its outcomes once (some 100,000 decoded for a fleet that size),
// a minute or more after its last move.
func (r *Running) RolloutSettled() bool { return r.settled.Swap(false) }

// Ready reports what keeps this process from doing its job, for /readyz:
// changes the watcher has not managed to publish yet.
func (r *Running) Ready() error {
	if w := r.watcher.Load(); w != nil {
		if n, err := w.Unpublished(); n > 0 {
			return fmt.Errorf("watcher: %d changes not published yet, retrying: %w", n, err)
		}
	}
	return nil
}

// Wait blocks until every stage has stopped (the context given to Start
// ended, or a stage failed) and returns the first failure.
func (r *Running) Wait() error {
	defer r.cancel()
	return r.group.Wait()
}

// Start starts the configured stages over one informer cache, shared by
// every stage (and the stand-in). It returns once the cache has synced, so
// planning starts from a complete view; Wait returns only after every
// stage and every informer goroutine has stopped.
func Start(ctx context.Context, cfg Config) (*Running, error) {
	for _, s := range cfg.Stages {
		if !slices.Contains(AllStages, s) {
			return nil, fmt.Errorf("pipeline: unknown stage %q", s)
		}
	}
	if len(cfg.Stages) == 0 && !cfg.StandIn {
		return nil, errors.New("pipeline: no stage to run")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.moving = new(applier.Activity)
	newCache := kube.NewCache
	if cfg.StandIn {
		newCache = kube.NewWholeCache // the stand-in starts VMIs from whole templates
	}
	fleet, err := newCache(cfg.Clients, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	cfg.Metrics.FleetDrift(func() (behind, hotplugPending map[string]int, ok bool) {
		if !fleet.HasSynced() {
			return nil, nil, false
		}
		behind, hotplugPending = map[string]int{}, map[string]int{}
		for _, row := range drift.Measure(fleet, drift.Filter{CountsOnly: true}) {
			object := row.Object.String()
			behind[object], hotplugPending[object] = row.NotLatest(), row.HotplugPending
		}
		return behind, hotplugPending, true
	})
	ctx, cancel := context.WithCancel(ctx)
	group, ctx := errgroup.WithContext(ctx)
	r := &Running{group: group, cancel: cancel, moving: cfg.moving, fleet: fleet}
	cfg.verifier, cfg.pruner, cfg.settled = &r.verifier, &r.pruner, &r.settled
	runs, err := addStages(ctx, cfg, fleet, &r.watcher)
	if err != nil {
		return nil, errors.Join(err, r.abandon(runs))
	}
	fleet.Start(ctx)
	group.Go(func() error {
		<-ctx.Done()
		fleet.Shutdown()
		return nil
	})
	if err := fleet.WaitForSync(ctx, cfg.SyncTimeout); err != nil {
		return nil, errors.Join(err, r.abandon(runs))
	}
	// The first lists of a large fleet leave hundreds of MiB of decoded
	// pages behind; give them back now rather than when the scavenger
	// gets to them, so the process holds what its caches hold.
	debug.FreeOSMemory()
	// Only now: a planner that consumed an event before the VM cache was
	// filled would plan it for no VM at all.
	for _, run := range runs {
		group.Go(run)
	}
	return r, nil
}

// abandon ends a pipeline that could not start: the stages it built run
// on the ended context, so each releases what it holds, and it waits for
// them and the informers.
func (r *Running) abandon(runs []func() error) error {
	r.cancel()
	for _, run := range runs {
		r.group.Go(run)
	}
	if err := r.group.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// addStages builds each configured stage over fleet, before the informers
// start, so every handler sees every object from the first list, and
// returns their Run functions, which Start calls once the cache has synced.
func addStages(ctx context.Context, cfg Config, fleet *kube.Cache, current *atomic.Pointer[watcher.Watcher]) (runs []func() error, _ error) {
	if cfg.StandIn {
		s := standin.New(standin.Config{Kube: fleet.Clients.Kube, Virt: fleet.Clients.Virt, VMs: fleet.VMInformer(), VMIs: fleet.VMIInformer(),
			KubeVirts: fleet.KubeVirtInformer(), Log: cfg.Log, Workers: 4, MigrationDuration: cfg.StandInMigration,
			MigrationObjects: true, FinalizeLag: cfg.StandInFinalizeLag})
		if cfg.StandInStarted != nil {
			cfg.StandInStarted(s)
		}
		runs = append(runs, func() error { return s.Run(ctx) })
	}
	if slices.Contains(cfg.Stages, StageWatcher) {
		run, err := addWatcher(ctx, cfg, fleet, current)
		if err != nil {
			return nil, err
		}
		runs = append(runs, run)
	}
	if !slices.Contains(cfg.Stages, StagePlanner) && !slices.Contains(cfg.Stages, StageApplier) {
		return runs, nil
	}
	recorder, stop := kube.NewRecorder(cfg.Clients)
	runs = append(runs, func() error { <-ctx.Done(); stop(); return nil })
	grace := cmp.Or(cfg.ShutdownGrace, DefaultShutdownGrace)
	for _, s := range []struct {
		name string
		add  func(context.Context, Config, *kube.Cache, record.EventRecorder, time.Duration) ([]func() error, error)
	}{{StagePlanner, addPlanner}, {StageApplier, addApplier}} {
		if !slices.Contains(cfg.Stages, s.name) {
			continue
		}
		more, err := s.add(ctx, cfg, fleet, recorder, grace)
		if err != nil {
			return nil, err
		}
		runs = append(runs, more...)
	}
	return runs, nil
}

// addPlanner builds the planner and, beside it, the keeper of rollout
// records (rollout.Keeper) and the answers to kvlive switch's previews from
// the planner's cache (preview.Server).
func addPlanner(ctx context.Context, cfg Config, fleet *kube.Cache, recorder record.EventRecorder, grace time.Duration) ([]func() error, error) {
	p, err := planner.New(planner.Config{Recorder: recorder, Fleet: fleet, JetStream: cfg.JetStream, Log: cfg.Log, Tracer: cfg.Tracer, Workers: cfg.PlannerWorkers,
		TraceFanout: cfg.TraceFanout, Metrics: cfg.Metrics, Grace: grace, Policy: cfg.Policy, Webhooks: cfg.Webhooks})
	if err != nil {
		return nil, err
	}
	k := &rollout.Keeper{JS: cfg.JetStream, Horizon: cfg.Horizon, Log: cfg.Log, AgedOut: cfg.Metrics.AgedOut, Kept: cfg.Metrics.KeptPastHorizon,
		Failed: cfg.Metrics.SweepFailed, Marked: func(marked, open int) {
			cfg.Metrics.RolloutsSettled(marked, open)
			if marked > 0 && cfg.settled != nil {
				cfg.settled.Store(true)
			}
		}}
	previews := &preview.Server{Conn: cfg.JetStream.Conn(), Fleet: fleet, Scope: cfg.Namespace, Log: cfg.Log, Metrics: cfg.Metrics}
	return []func() error{func() error { return p.Run(ctx) }, func() error { k.Run(ctx); return nil }, func() error { return previews.Run(ctx) }}, nil
}

// addApplier builds the applier and, beside it, the rollout controller,
// which steps batched rollouts through their gates and releases held
// plans (rollout.Controller), and the verifier, which stores KubeVirt's
// verdict on every VM moved (rollout.Verifier), with the applier's NATS
// permissions.
func addApplier(ctx context.Context, cfg Config, fleet *kube.Cache, recorder record.EventRecorder, grace time.Duration) ([]func() error, error) {
	if err := fleet.WatchMigrations(ctx); err != nil {
		cfg.Log.Warn("applier: a migration slot is freed when the VMI shows its migration ended, a moment before KubeVirt counts it ended: "+
			"grant list and watch on virtualmachineinstancemigrations (deploy/base/rbac.yaml) for the slot to wait for that", "err", err)
	}
	a, err := applier.New(applier.Config{Recorder: recorder, Clients: cfg.Clients, Fleet: fleet, JetStream: cfg.JetStream, Log: cfg.Log, Tracer: cfg.Tracer,
		Workers: cfg.ApplierWorkers, Rate: cfg.Rate, ObserveTimeout: cfg.ObserveTimeout, QueueTimeout: cfg.QueueTimeout, SlotReactions: cfg.SlotReactions, Migrations: fleet, Metrics: cfg.Metrics, Grace: grace, Activity: cfg.moving})
	if err != nil {
		return nil, err
	}
	rc, err := rollout.NewController(rollout.ControllerConfig{Recorder: recorder, Fleet: fleet, JetStream: cfg.JetStream, Log: cfg.Log,
		Tracer: cfg.Tracer, Metrics: cfg.Metrics, Grace: grace, Verdicts: cfg.ObserveTimeout > 0, Webhooks: cfg.Webhooks})
	if err != nil {
		return nil, err
	}
	runs := []func() error{func() error { return a.Run(ctx) }, func() error { return rc.Run(ctx) }}
	if cfg.ObserveTimeout > 0 {
		v, err := rollout.NewVerifier(rollout.VerifierConfig{Recorder: recorder, Fleet: fleet, JetStream: cfg.JetStream, Log: cfg.Log,
			Tracer: cfg.Tracer, Metrics: cfg.Metrics, Deadline: cfg.ObserveTimeout, Workers: 4})
		if err != nil {
			return nil, err
		}
		if cfg.verifier != nil {
			cfg.verifier.Store(v)
		}
		runs = append(runs, func() error { return v.Run(ctx) })
	}
	return runs, nil
}

// addWatcher builds the watcher, or, with leader election, what runs one
// while this replica leads, and exports its queue depth and backlog.
func addWatcher(ctx context.Context, cfg Config, fleet *kube.Cache, current *atomic.Pointer[watcher.Watcher]) (func() error, error) {
	cfg.Metrics.QueueDepth(StageWatcher, func() int {
		if w := current.Load(); w != nil {
			return w.QueueDepth()
		}
		return 0
	})
	cfg.Metrics.QueueDepth(queuePruner, func() int {
		if p := cfg.pruner.Load(); p != nil {
			return p.Backlog()
		}
		return 0
	})
	cfg.Metrics.WatcherBacklog(func() int {
		if w := current.Load(); w != nil {
			n, _ := w.Unpublished()
			return n
		}
		return 0
	})
	if cfg.LeaderElection != nil {
		return func() error { return runLeading(ctx, cfg, fleet, current) }, nil
	}
	w, err := newWatcher(cfg, fleet)
	if err != nil {
		return nil, err
	}
	current.Store(w)
	return func() error { return runWatcher(ctx, cfg, fleet, w) }, nil
}

// runWatcher runs w and, if cfg asks for it, the revision pruner, which
// like the watcher is one per fleet: until ctx ends or either fails. The
// pruner waits while this process's applier moves VMs.
func runWatcher(ctx context.Context, cfg Config, fleet *kube.Cache, w *watcher.Watcher) error {
	if cfg.RevisionRetention == nil {
		return w.Run(ctx)
	}
	p, err := pruner.New(pruner.Config{Fleet: fleet, Retention: *cfg.RevisionRetention, Log: cfg.Log, Metrics: cfg.Metrics,
		Busy: func() bool { return cfg.moving.Busy(time.Now()) }})
	if err != nil {
		return err
	}
	if cfg.pruner != nil {
		cfg.pruner.Store(p)
		defer cfg.pruner.CompareAndSwap(p, nil)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(ctx) })
	g.Go(func() error { return p.Run(ctx) })
	return g.Wait()
}
