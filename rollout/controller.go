package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/telemetry"
	"kvlive/internal/webhook"
)

const tracerName = "kvlive/rollout"

// Fleet is what the controller reads from the process's informer cache:
// KubeVirt's report on each moved VM, and the rolled-out objects its
// Kubernetes Events are recorded on.
type Fleet interface {
	VM(namespace, name string) *virtv1.VirtualMachine
	VMI(namespace, name string) *virtv1.VirtualMachineInstance
	Object(ref events.Ref) any
}

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	Fleet     Fleet
	JetStream jetstream.JetStream
	Log       *slog.Logger
	Tracer    trace.TracerProvider
	Clock     clock.PassiveClock
	Metrics   *telemetry.Metrics
	// Grace is how long plans being released may finish after ctx ends.
	Grace time.Duration
	// Recorder, when set, records Kubernetes Events on a batched rollout's
	// object: a batch released, a gate that paused or aborted it.
	Recorder record.EventRecorder
	// Verdicts says the verifier runs: a batch's gate waits for KubeVirt's
	// verdict on each moved VM and counts one other than the prediction as
	// a failure. Without it the gate reads KubeVirt's report on the cache.
	Verdicts bool
	// Webhooks calls the confirm and check webhooks rollout policies name;
	// nil refuses them (the gate fails, saying so).
	Webhooks *webhook.Client
}

// Controller carries rollouts between the planner and the applier: it
// steps each batched rollout through its gates, releasing its staged
// batches, and sends a paused rollout's held plans back once it leaves the
// pause. Every replica runs one beside its applier; what they write is
// compare-and-set or deduplicated, so replicas never act twice.
type Controller struct {
	cfg    ControllerConfig
	tracer trace.Tracer
	// watch is every rollout's pause/abort state, kept current by Run.
	watch *Watch
	// held is the stream paused rollouts' plans are parked in.
	held jetstream.Stream
	// leftPause queues the events whose held plans are to be released; ""
	// sweeps every event whose rollout is not paused.
	leftPause chan string
	// notesMu guards gateNotes, when each batched rollout's waiting gate
	// was last noted, and refusedAt, when each rollout's refused control
	// record was last logged.
	notesMu   sync.Mutex
	gateNotes map[string]time.Time
	refusedAt map[string]time.Time
	// hooks are the webhook calls in flight, off the gate loop.
	hooks *hookCalls
}

// NewController builds a Controller; nothing runs until Run.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Fleet == nil || cfg.JetStream == nil {
		return nil, errors.New("rollout: the controller needs a fleet and JetStream")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Controller{cfg: cfg, tracer: cfg.Tracer.Tracer(tracerName), leftPause: make(chan string, 64),
		gateNotes: map[string]time.Time{}, refusedAt: map[string]time.Time{}}, nil
}

// Run releases held plans and steps batched rollouts until ctx ends.
func (rc *Controller) Run(ctx context.Context) error {
	var err error
	if rc.held, err = rc.cfg.JetStream.Stream(ctx, events.StreamHeld); err != nil {
		return fmt.Errorf("rollout: stream %s: %w", events.StreamHeld, err)
	}
	store, err := Open(ctx, rc.cfg.JetStream)
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	rc.hooks = newHookCalls(ctx)
	defer rc.hooks.wait()
	if rc.watch, err = store.StartWatch(ctx, func(eventID string, st State) {
		rc.hooks.moveOn(eventID, st.Control)
		if st.State != events.StatePaused {
			rc.releaseLater(ctx, eventID)
		}
	}); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	rc.cfg.Metrics.RolloutsPaused(rc.watch.Paused)
	var wg sync.WaitGroup
	wg.Go(func() { rc.releaser(ctx) })
	wg.Go(func() { rc.sweepHeld(ctx) })
	wg.Go(func() { rc.runGates(ctx, store) })
	rc.cfg.Log.Info("rollout controller started")
	wg.Wait()
	return nil
}

// sweepHeld queues a sweep of held plans whose rollout is not paused,
// every heldSweepEvery, while the releaser is not behind.
func (rc *Controller) sweepHeld(ctx context.Context) {
	tick := time.NewTicker(heldSweepEvery)
	defer tick.Stop()
	for {
		select {
		case rc.leftPause <- "":
		default:
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
