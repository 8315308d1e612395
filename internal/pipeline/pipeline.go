// Package pipeline wires kvlive's stages together in one process over one
// fleet view: what `kvlive run`, the demo and the tests start.
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
	"kvlive/internal/fleet"
	"kvlive/internal/kube"
	"kvlive/internal/metrics"
	"kvlive/internal/standin"
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
	Metrics        *metrics.Metrics
	// LeaderElection, when set, runs the watcher only while this replica
	// holds the Lease it names.
	LeaderElection *LeaderElection
}

// Running is a started pipeline.
type Running struct {
	group *errgroup.Group
}

// Wait blocks until every stage has stopped (the context given to Start
// ended, or a stage failed) and returns the first failure.
func (r *Running) Wait() error { return r.group.Wait() }

// Start starts the configured stages. It returns once the fleet's caches
// are synced, so planning starts from a complete view.
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
	group, ctx := errgroup.WithContext(ctx)
	r := &Running{group: group}
	if cfg.StandIn {
		s := standin.New(standin.Config{Clients: cfg.Clients, Log: cfg.Log, Workers: 4})
		group.Go(func() error { return s.Run(ctx) })
	}
	if slices.Contains(cfg.Stages, StageWatcher) {
		var current atomic.Pointer[watcher.Watcher]
		cfg.Metrics.QueueDepth(StageWatcher, func() int {
			if w := current.Load(); w != nil {
				return w.QueueDepth()
			}
			return 0
		})
		if cfg.LeaderElection != nil {
			group.Go(func() error { return runLeading(ctx, cfg, &current) })
		} else {
			w, err := newWatcher(cfg)
			if err != nil {
				return nil, err
			}
			current.Store(w)
			group.Go(func() error { return w.Run(ctx) })
		}
	}
	plan, apply := slices.Contains(cfg.Stages, StagePlanner), slices.Contains(cfg.Stages, StageApplier)
	if !plan && !apply {
		return r, nil
	}
	f := fleet.New(cfg.Clients, cfg.Namespace)
	if err := f.Run(ctx); err != nil {
		return nil, err
	}
	if plan {
		p, err := planner.New(planner.Config{Fleet: f, JetStream: cfg.JetStream, Log: cfg.Log, Tracer: cfg.Tracer, Workers: cfg.PlannerWorkers,
			TraceFanout: cfg.TraceFanout, Metrics: cfg.Metrics})
		if err != nil {
			return nil, err
		}
		group.Go(func() error { return p.Run(ctx) })
	}
	if apply {
		a, err := applier.New(applier.Config{Fleet: f, JetStream: cfg.JetStream, Log: cfg.Log, Tracer: cfg.Tracer, Workers: cfg.ApplierWorkers, Rate: cfg.Rate,
			ObserveTimeout: cfg.ObserveTimeout, Metrics: cfg.Metrics})
		if err != nil {
			return nil, err
		}
		group.Go(func() error { return a.Run(ctx) })
	}
	return r, nil
}
