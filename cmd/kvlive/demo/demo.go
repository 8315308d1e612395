package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"kvlive/cmd/kvlive/pipeline"
	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/internal/kube"
	"kvlive/internal/kube/inmemory"
	"kvlive/internal/standin"
	"kvlive/internal/telemetry"
)

// Config configures a demo run.
type Config struct {
	Fleet Options
	// DataDir holds the JetStream store, emptied at the start and kept
	// afterwards so kvlive trace, outcomes and events can read the rollouts;
	// empty uses a temporary directory removed at the end.
	DataDir string
	// Workers is the applier's concurrency.
	Workers int
	Out     io.Writer
	Log     *slog.Logger
	// Command is how the user runs kvlive, for the commands the demo
	// prints at the end ("kvlive" when empty).
	Command string
	// Progress draws progress bars on Out.
	Progress bool
}

// Validate refuses a fleet or an applier the demo cannot play.
func (cfg Config) Validate() error {
	switch {
	case cfg.Fleet.VMs <= 0 || cfg.Fleet.Namespaces <= 0:
		return errors.New("demo: --vms and --namespaces must be positive")
	case cfg.Fleet.RunningPercent < 0 || cfg.Fleet.RunningPercent > 100:
		return fmt.Errorf("demo: --running-percent %d: want 0 to 100", cfg.Fleet.RunningPercent)
	case cfg.Workers < 0:
		return fmt.Errorf("demo: --workers %d: want at least 1", cfg.Workers)
	}
	return nil
}

// Run plays the demo. It returns an error if any VM ends anywhere but where
// the fleet's shape says it must.
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, err := start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.stop(cancel)) }()

	fmt.Fprintf(cfg.Out, "kvlive demo: %d VMs in %d namespaces, an in-memory cluster and an embedded NATS server\n",
		cfg.Fleet.VMs, cfg.Fleet.Namespaces)
	if err := env.waitPinned(ctx); err != nil {
		return err
	}
	edit, err := env.editInstancetype(ctx)
	if err != nil {
		return err
	}
	sw, err := env.requestSwitch(ctx)
	if err != nil {
		return err
	}
	return env.report([]*stepResult{edit, sw})
}

// env is a running demo: the fake cluster, NATS and every stage.
type env struct {
	cfg     Config
	clients kube.Clients
	shapes  []vmShape
	js      jetstream.JetStream
	closers []func() error
	running *pipeline.Running
	tracer  *sdktrace.TracerProvider
	standin *standin.Controller
}

// standInMigration is how long each of the in-memory KubeVirt's live
// migrations takes: short, so the demo ends in seconds, yet long enough
// that KubeVirt's limits pace the rollout.
const standInMigration = 20 * time.Millisecond

func start(ctx context.Context, cfg Config) (*env, error) {
	objs, shapes := seed(cfg.Fleet)
	e := &env{cfg: cfg, shapes: shapes, clients: inmemory.New(nil, objs...)}
	dir, err := e.openStore()
	if err != nil {
		return e, err
	}
	if err := e.openBus(ctx, dir); err != nil {
		return e, err
	}
	return e, e.startStages(ctx)
}

// openStore takes the data directory (a temporary one without
// --data-dir), only one kvlive owns and no other process holds, and
// empties its JetStream data: the demo's deterministic event ids would be
// deduplicated against an earlier run's.
func (e *env) openStore() (string, error) {
	dir := e.cfg.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "kvlive-demo-")
		if err != nil {
			return "", fmt.Errorf("demo: data dir: %w", err)
		}
		dir = tmp
		e.closers = append(e.closers, func() error { return os.RemoveAll(tmp) })
	}
	store, err := bus.OpenStore(dir)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	e.closers = append(e.closers, store.Close)
	if err := store.Empty(); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	if err := store.Advertise("kvlive demo", ""); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	return dir, nil
}

// openBus starts the embedded NATS server on dir, sets kvlive's streams up
// on it and traces into it.
func (e *env) openBus(ctx context.Context, dir string) error {
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: dir, DontListen: true})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() error { ns.Shutdown(); ns.WaitForShutdown(); return nil })
	nc, err := bus.ConnectEmbedded(ns, "kvlive-demo", e.cfg.Log)
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() error { return nc.Drain() })
	if e.js, err = bus.NewJetStream(nc, bus.ReadBound); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := events.Setup(ctx, e.js, events.DefaultStreamOptions(), nil); err != nil {
		return err
	}
	tp, err := telemetry.Setup(ctx, "kvlive-demo", e.js)
	if err != nil {
		return err
	}
	e.tracer = tp
	// Flushed before NATS closes, so every span is stored.
	e.closers = append(e.closers, func() error { return tp.Shutdown(context.WithoutCancel(ctx)) })
	return nil
}

func (e *env) startStages(ctx context.Context) error {
	r, err := pipeline.Start(ctx, pipeline.Config{
		Clients: e.clients, JetStream: e.js, Stages: pipeline.AllStages, StandIn: true,
		StandInMigration: standInMigration, StandInStarted: func(s *standin.Controller) { e.standin = s },
		Log: e.cfg.Log, Tracer: e.tracer, ApplierWorkers: e.cfg.Workers, ObserveTimeout: verdictDeadline,
		Horizon: events.DefaultStreamOptions().MaxAge,
	})
	e.running = r
	return err
}

func (e *env) stop(cancel context.CancelFunc) error {
	cancel()
	var errs []error
	if e.running != nil {
		errs = append(errs, e.running.Wait())
	}
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	return errors.Join(errs...)
}

// poll calls cond every interval until it returns true, an error, or the timeout.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
