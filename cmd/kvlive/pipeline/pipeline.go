// Package pipeline is the process wiring: kvlive's stages (and, for the demo
// and tests, the virt-controller stand-in) in one process over one informer
// cache, started, synced and shut down together. `kvlive run`, the demo and
// the tests start it.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"kvlive/applier"
	"kvlive/internal/kube"
	"kvlive/internal/standin"
	"kvlive/internal/telemetry"
	"kvlive/planner"
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
	// StandIn also runs the virt-controller stand-in (demo and tests only).
	StandIn bool
	// ObserveTimeout and TraceFanout tune tracing (see applier.Config and planner.Config).
	ObserveTimeout time.Duration
	TraceFanout    int
	Metrics        *telemetry.Metrics
	// LeaderElection, when set, runs the watcher only while this replica
	// holds the Lease it names.
	LeaderElection *LeaderElection
	// SyncTimeout bounds the wait for the informer caches' first list; zero
	// waits until the context ends.
	SyncTimeout time.Duration
}

// Running is a started pipeline.
type Running struct {
	group   *errgroup.Group
	cancel  context.CancelFunc
	watcher atomic.Pointer[watcher.Watcher]
}

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
	fleet, err := kube.NewCache(cfg.Clients, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	group, ctx := errgroup.WithContext(ctx)
	r := &Running{group: group, cancel: cancel}
	if err := addStages(ctx, group, cfg, fleet, &r.watcher); err != nil {
		return nil, errors.Join(err, r.stop())
	}
	fleet.Start(ctx)
	group.Go(func() error {
		<-ctx.Done()
		fleet.Shutdown()
		return nil
	})
	if err := fleet.WaitForSync(ctx, cfg.SyncTimeout); err != nil {
		return nil, errors.Join(err, r.stop())
	}
	return r, nil
}

// stop ends a pipeline that could not start and waits for what it started.
func (r *Running) stop() error {
	r.cancel()
	if err := r.group.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// addStages builds each configured stage over fleet, before the informers
// start, so every handler sees every object from the first list.
func addStages(ctx context.Context, group *errgroup.Group, cfg Config, fleet *kube.Cache, current *atomic.Pointer[watcher.Watcher]) error {
	if cfg.StandIn {
		s := standin.New(standin.Config{Cache: fleet, Log: cfg.Log, Workers: 4})
		group.Go(func() error { return s.Run(ctx) })
	}
	if slices.Contains(cfg.Stages, StageWatcher) {
		cfg.Metrics.QueueDepth(StageWatcher, func() int {
			if w := current.Load(); w != nil {
				return w.QueueDepth()
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
			group.Go(func() error { return runLeading(ctx, cfg, fleet, current) })
		} else {
			w, err := newWatcher(cfg, fleet)
			if err != nil {
				return err
			}
			current.Store(w)
			group.Go(func() error { return w.Run(ctx) })
		}
	}
	if slices.Contains(cfg.Stages, StagePlanner) {
		p, err := planner.New(planner.Config{Fleet: fleet, JetStream: cfg.JetStream, Log: cfg.Log, Tracer: cfg.Tracer, Workers: cfg.PlannerWorkers,
			TraceFanout: cfg.TraceFanout, Metrics: cfg.Metrics})
		if err != nil {
			return err
		}
		group.Go(func() error { return p.Run(ctx) })
	}
	if slices.Contains(cfg.Stages, StageApplier) {
		a, err := applier.New(applier.Config{Clients: cfg.Clients, Fleet: fleet, JetStream: cfg.JetStream, Log: cfg.Log, Tracer: cfg.Tracer,
			Workers: cfg.ApplierWorkers, Rate: cfg.Rate, ObserveTimeout: cfg.ObserveTimeout, Metrics: cfg.Metrics})
		if err != nil {
			return err
		}
		group.Go(func() error { return a.Run(ctx) })
	}
	return nil
}
