package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/consumer"
	"kvlive/internal/telemetry"
)

const tracerName = "kvlive/planner"

// Fleet is what the planner reads from the process's informer cache.
type Fleet interface {
	instancetype.Lookup
	instancetype.Objects
	// Referencing returns the VMs that reference ref, narrowed to a
	// namespace ("" for all) and a label selector (nil for all).
	Referencing(ref events.Ref, namespace string, selector labels.Selector) ([]*virtv1.VirtualMachine, error)
	// Cluster is the KubeVirt CR's live-update configuration.
	Cluster() instancetype.Cluster
}

// Config configures a Planner.
type Config struct {
	Fleet     Fleet
	JetStream jetstream.JetStream
	Log       *slog.Logger
	Tracer    trace.TracerProvider
	Clock     clock.PassiveClock
	// Workers is how many events are planned at once.
	Workers int
	// TraceFanout is the fleet size above which each VM's apply span roots
	// a trace of its own, linked to the plan span, so a huge rollout stays
	// readable in a trace backend. Zero means DefaultTraceFanout.
	TraceFanout int
	Metrics     *telemetry.Metrics
	// Grace is how long events being planned may finish after ctx ends.
	Grace time.Duration
}

// DefaultTraceFanout keeps rollouts of up to 1,000 VMs in one trace.
const DefaultTraceFanout = 1000

// Planner consumes events and publishes per-VM plans.
type Planner struct {
	cfg    Config
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New builds a Planner; nothing runs until Run.
func New(cfg Config) (*Planner, error) {
	if cfg.Fleet == nil || cfg.JetStream == nil {
		return nil, errors.New("planner: fleet and JetStream are required")
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
	cfg.Workers = max(cfg.Workers, 1)
	if cfg.TraceFanout <= 0 {
		cfg.TraceFanout = DefaultTraceFanout
	}
	return &Planner{cfg: cfg, tracer: cfg.Tracer.Tracer(tracerName), prop: propagation.TraceContext{}}, nil
}

// Run consumes events until ctx ends and the events being planned are
// done. The fleet must be running.
func (p *Planner) Run(ctx context.Context) error {
	cons, err := p.cfg.JetStream.Consumer(ctx, events.StreamEvents, events.ConsumerPlanner)
	if err != nil {
		return fmt.Errorf("planner: consumer: %w", err)
	}
	rt, err := consumer.New(consumer.Config{
		Stage: events.ConsumerPlanner, Consumer: cons, JetStream: p.cfg.JetStream, Workers: p.cfg.Workers,
		MaxDeliver: events.PlannerMaxDeliver, Backoff: consumer.Backoff{Min: time.Second, Max: 30 * time.Second, Jitter: 0.2},
		Grace: p.cfg.Grace, Log: p.cfg.Log, Metrics: p.cfg.Metrics,
	})
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	p.cfg.Log.Info("planner started")
	return rt.Run(ctx, p.handle)
}

// handle plans one event: every plan stored and the rollout recorded is
// done; a transient failure is retried; what cannot decode is poison.
func (p *Planner) handle(ctx context.Context, msg jetstream.Msg, _ consumer.Delivery) consumer.Fate {
	ctx = p.prop.Extract(ctx, events.HeaderCarrier(msg.Headers()))
	eventID, typ, target, vms, err := p.resolve(msg)
	if events.IsDecodeError(err) {
		return consumer.Poison(err.Error())
	}
	if err != nil {
		return consumer.Retry(err)
	}
	ctx, span := p.tracer.Start(ctx, "planner.plan "+target.Object.String(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("kvlive.event.id", eventID), attribute.Int("kvlive.vms", len(vms))))
	defer span.End()
	counts, err := p.publishPlans(ctx, eventID, target, vms)
	if err == nil {
		err = p.recordRollout(ctx, eventID, target, counts)
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return consumer.Retry(fmt.Errorf("event %s: %w", eventID, err))
	}
	for r, n := range counts {
		span.SetAttributes(attribute.Int("kvlive.plans."+string(r), n))
	}
	p.cfg.Metrics.Event(typ)
	p.cfg.Metrics.Plans(counts)
	p.cfg.Log.Info("event planned", "event", eventID, "object", target.Object.String(), "vms", len(vms), "counts", counts)
	return consumer.Done()
}

// resolve decodes an event into its id and type, its target and the VMs it reaches.
func (p *Planner) resolve(msg jetstream.Msg) (string, string, instancetype.Target, []*virtv1.VirtualMachine, error) {
	env, err := events.Parse(msg.Data())
	if err != nil {
		return "", "", instancetype.Target{}, nil, err
	}
	id, t, vms, err := p.resolveEnvelope(env)
	return id, env.Type, t, vms, err
}

func (p *Planner) resolveEnvelope(env *events.Envelope) (string, instancetype.Target, []*virtv1.VirtualMachine, error) {
	switch env.Type {
	case events.TypeInstancetypeChanged, events.TypePreferenceChanged:
		var c events.Changed
		if err := env.Into(&c); err != nil {
			return "", instancetype.Target{}, nil, err
		}
		t, err := instancetype.ChangeTarget(p.cfg.Fleet, p.cfg.Fleet.Cluster(), c)
		if err != nil {
			return "", instancetype.Target{}, nil, err
		}
		vms, err := p.cfg.Fleet.Referencing(c.Object, "", nil)
		return env.ID, t, vms, err
	case events.TypeSwitchRequested:
		var s events.SwitchRequest
		if err := env.Into(&s); err != nil {
			return "", instancetype.Target{}, nil, err
		}
		sel, err := labels.Parse(s.Selector)
		if err != nil {
			return "", instancetype.Target{}, nil, &events.DecodeError{Reason: events.ReasonInvalid, Err: fmt.Errorf("selector %q: %w", s.Selector, err)}
		}
		vms, err := p.cfg.Fleet.Referencing(s.From, s.Namespace, sel)
		return env.ID, instancetype.SwitchTarget(p.cfg.Fleet, p.cfg.Fleet.Cluster(), s.From, s.To), vms, err
	}
	return "", instancetype.Target{}, nil, &events.DecodeError{Reason: events.ReasonUnknownType, Err: fmt.Errorf("%s is not an event the planner handles", env.Type)}
}
