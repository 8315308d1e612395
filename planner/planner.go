package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/consumer"
	"kvlive/internal/telemetry"
	"kvlive/internal/webhook"
	"kvlive/restart"
	"kvlive/rollout"
	"kvlive/undo"
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
	// VM returns the cached VM namespace/name, or nil (an undo's VMs).
	VM(namespace, name string) *virtv1.VirtualMachine
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
	// Policy is the rollout policy of events that name none (by the
	// object's events.PolicyAnnotation, or a switch request's own).
	Policy events.Policy
	// Recorder, when set, records Kubernetes Events on the objects whose
	// events are planned (a refused rollout policy).
	Recorder record.EventRecorder
	// Webhooks asks a policy's confirm webhook about the first batch
	// (rollout.Controller asks about the others); nil refuses them.
	Webhooks *webhook.Client
}

// DefaultTraceFanout keeps rollouts of up to 1,000 VMs in one trace.
const DefaultTraceFanout = 1000

// Planner consumes events and publishes per-VM plans.
type Planner struct {
	cfg    Config
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// batchable is, per stream read, whether it takes fast batch
	// publishes (batched).
	batchable sync.Map
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
	w, err := p.resolve(ctx, msg)
	if events.IsDecodeError(err) {
		return consumer.Poison(err.Error())
	}
	if err != nil {
		return consumer.Retry(err)
	}
	ctx, span := p.tracer.Start(ctx, "planner.plan "+w.target.Object.String(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("kvlive.event.id", w.eventID), attribute.Int("kvlive.vms", len(w.vms))))
	defer span.End()
	err = p.holdForPolicy(ctx, w)
	if err == nil {
		err = p.holdForWindow(ctx, w)
	}
	if err == nil {
		w.parked, err = p.pausedAhead(ctx, w)
	}
	if err == nil {
		w.supersedes, err = p.supersede(ctx, w)
	}
	plans, r := p.planAll(w)
	if err == nil {
		plans, err = p.recordRollout(ctx, w, plans, r)
	}
	if err == nil && !w.parked {
		w.parked, err = p.awaitConfirm(ctx, w, plans, r)
	}
	if err == nil {
		err = p.publishPlans(ctx, w, plans)
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return consumer.Retry(fmt.Errorf("event %s: %w", w.eventID, err))
	}
	for res, n := range r.counts {
		span.SetAttributes(attribute.Int("kvlive.plans."+string(res), n))
	}
	if len(r.batches) > 1 {
		span.SetAttributes(attribute.IntSlice("kvlive.batches", r.batches))
	}
	p.cfg.Metrics.Event(w.typ)
	p.cfg.Metrics.Plans(r.counts)
	p.cfg.Log.Info("event planned", "event", w.eventID, "object", w.target.Object.String(), "vms", len(w.vms), "counts", r.counts, "batches", r.batches)
	return consumer.Done()
}

// work is one event resolved: what it moves VMs to, the VMs, and the
// rollout policy it goes by (or why the one asked for was refused).
type work struct {
	eventID, typ string
	target       instancetype.Target
	vms          []*virtv1.VirtualMachine
	policy       events.Policy
	policyError  string
	// parked: the rollout is paused before its plans exist (its policy
	// refused, or paused ahead), so its first batch is parked as held.
	parked bool
	// plans, for an undo, are its plans as undo.Plan made them.
	plans []events.Plan
	// generation is a change's; supersedes, the older rollouts it took over.
	generation int64
	supersedes []string
}

// resolve decodes an event into its work.
func (p *Planner) resolve(ctx context.Context, msg jetstream.Msg) (work, error) {
	env, err := events.Parse(msg.Data())
	if err != nil {
		return work{}, err
	}
	w, err := p.resolveEnvelope(ctx, env)
	w.typ = env.Type
	return w, err
}

func (p *Planner) resolveEnvelope(ctx context.Context, env *events.Envelope) (work, error) {
	w := work{eventID: env.ID}
	switch env.Type {
	case events.TypeInstancetypeChanged, events.TypePreferenceChanged:
		var c events.Changed
		if err := env.Into(&c); err != nil {
			return w, err
		}
		t, err := instancetype.ChangeTarget(p.cfg.Fleet, p.cfg.Fleet.Cluster(), c)
		if err != nil {
			return w, err
		}
		if err := checkChange(p.cfg.Fleet.Object(c.Object), c, t); err != nil {
			return w, err
		}
		w.target, w.generation = t, c.Generation
		w.policy, w.policyError = p.policyOf(nil, c.Object)
		w.vms, err = p.cfg.Fleet.Referencing(c.Object, "", nil)
		w.vms = only(w.vms, c.Only)
		return w, err
	case events.TypeSwitchRequested:
		var s events.SwitchRequest
		if err := env.Into(&s); err != nil {
			return w, err
		}
		sel, err := labels.Parse(s.Selector)
		if err != nil {
			return w, &events.DecodeError{Reason: events.ReasonInvalid, Err: fmt.Errorf("selector %q: %w", s.Selector, err)}
		}
		w.target = instancetype.SwitchTarget(p.cfg.Fleet, p.cfg.Fleet.Cluster(), s.From, s.To)
		w.target.Force = s.ForceConflicts
		w.policy, w.policyError = p.policyOf(s.Policy, s.To)
		w.vms, err = p.cfg.Fleet.Referencing(s.From, s.Namespace, sel)
		w.vms = only(w.vms, s.Only)
		return w, err
	case events.TypeUndoRequested:
		var u events.UndoRequest
		if err := env.Into(&u); err != nil {
			return w, err
		}
		o, err := undo.Read(ctx, p.cfg.JetStream, u.Of)
		if errors.Is(err, undo.ErrCannotUndo) {
			return w, &events.DecodeError{Reason: events.ReasonInvalid, Err: err}
		}
		if err != nil {
			return w, err
		}
		w.target.Target, w.vms, w.plans = undo.Plan(p.cfg.Fleet, env.ID, o)
		w.policy, w.policyError = p.policyOf(u.Policy, w.target.Object)
		return w, nil
	case events.TypeRestartRequested:
		var r events.RestartRequest
		if err := env.Into(&r); err != nil {
			return w, err
		}
		sel, err := labels.Parse(r.Selector)
		if err != nil {
			return w, &events.DecodeError{Reason: events.ReasonInvalid, Err: fmt.Errorf("selector %q: %w", r.Selector, err)}
		}
		if w.vms, err = p.cfg.Fleet.Referencing(r.Object, r.Namespace, sel); err != nil {
			return w, err
		}
		w.vms = only(w.vms, r.Only)
		w.target.Target = events.Target{Move: events.MoveRestart, Object: r.Object}
		w.plans = restart.Plan(p.cfg.Fleet, env.ID, r.Object, w.vms)
		w.policy, w.policyError = p.policyOf(r.Policy, r.Object)
		w.policy = w.policy.ForRestart()
		return w, nil
	}
	return w, &events.DecodeError{Reason: events.ReasonUnknownType, Err: fmt.Errorf("%s is not an event the planner handles", env.Type)}
}

// pausedAhead reports whether the event's rollout is paused before it was
// planned (by its refused policy, or rollout pause --ahead): its plans are
// then parked as held, for resume to release, rather than sent to
// appliers whose watch of the control records may not have seen the pause.
func (p *Planner) pausedAhead(ctx context.Context, w work) (bool, error) {
	if w.policyError != "" {
		return true, nil
	}
	store, err := rollout.Open(ctx, p.cfg.JetStream)
	if err != nil {
		return false, err
	}
	c, _, err := store.Get(ctx, w.eventID)
	if errors.Is(err, rollout.ErrUnreadable) {
		return false, nil // its own event's business: the applier reports it
	}
	return c.State == events.StatePaused, err
}

// supersede aborts the rollouts of older generations of a changed object
// that may still move a VM: the new rollout plans every VM of the object,
// their remaining VMs included, straight to the newest generation. Each is
// aborted with the reason, so its VMs not yet moved are skipped saying
// why, and its staged batches are released to be skipped too. Which older
// rollouts still move is read from the work streams' per-subject state in
// one pass, however many older rollouts the store holds and however many
// outcomes they have: a freshly started planner's first edit costs what
// any later one does. One that moves nothing (settled, or paused with
// nothing held) has nothing to take over and is left as it is.
func (p *Planner) supersede(ctx context.Context, w work) ([]string, error) {
	if w.generation == 0 || w.target.UID == "" {
		return nil, nil
	}
	prefix := events.EventIDPrefix(w.target.Object.Kind, w.target.UID)
	ids, err := rollout.EventIDs(ctx, p.cfg.JetStream, prefix)
	if err != nil {
		return nil, err
	}
	ids = slices.DeleteFunc(ids, func(id string) bool {
		gen, err := strconv.ParseInt(strings.TrimPrefix(id, prefix), 10, 64)
		return err != nil || gen >= w.generation
	})
	if len(ids) == 0 {
		return nil, nil
	}
	moving, err := rollout.Moving(ctx, p.cfg.JetStream)
	if err != nil {
		// Planning past an older rollout that may still run would leave
		// two moving the same VMs: the event is retried, and
		// dead-lettered with this reason once its deliveries run out.
		return nil, fmt.Errorf("cannot tell whether an older rollout of %s still runs: %w", w.target.Object, err)
	}
	var store *rollout.Store
	var superseded []string
	for _, id := range ids {
		if !moving[id] {
			continue
		}
		if store == nil {
			if store, err = rollout.Open(ctx, p.cfg.JetStream); err != nil {
				return nil, err
			}
		}
		reason := "superseded by " + w.eventID + ", which moves its remaining VMs to generation " + strconv.FormatInt(w.generation, 10)
		_, changed, err := store.Apply(ctx, id, events.ActionAbort, reason, "kvlive planner", p.cfg.Clock.Now(), false)
		if err != nil {
			return nil, err
		}
		if !changed {
			continue // aborted already, by an operator or an earlier edit
		}
		superseded = append(superseded, id)
		p.cfg.Log.Info("rollout superseded", "event", id, "by", w.eventID)
	}
	return superseded, nil
}

// checkChange refuses a change event the cluster does not bear out, before
// anything is planned: a generation the object has not reached is retried
// (the cache may lag the watcher that saw it) until the planner's delivery
// budget dead-letters it with the reason; a spec that is not the object's
// at that very generation is dead-lettered at once. An object deleted (or
// re-created) since is no forgery: its VMs get skip outcomes saying so.
func checkChange(live any, c events.Changed, t instancetype.Target) error {
	m, ok := live.(metav1.Object)
	if !ok || string(m.GetUID()) != c.UID {
		return nil
	}
	switch {
	case m.GetGeneration() < c.Generation:
		return fmt.Errorf("%s is at generation %d, not at the event's %d: the event is ahead of the cluster (or forged)", c.Object, m.GetGeneration(), c.Generation)
	case m.GetGeneration() == c.Generation:
		if spec, ok := instancetype.SpecOf(live); ok && !equality.Semantic.DeepEqual(spec, t.Spec) {
			return &events.DecodeError{Reason: events.ReasonInvalid,
				Err: fmt.Errorf("the event's spec is not %s's at generation %d: not an event of this cluster", c.Object, c.Generation)}
		}
	}
	return nil
}

// only keeps the VMs whose UID is in uids; every VM when uids is empty.
func only(vms []*virtv1.VirtualMachine, uids []string) []*virtv1.VirtualMachine {
	if len(uids) == 0 {
		return vms
	}
	return slices.DeleteFunc(vms, func(vm *virtv1.VirtualMachine) bool { return !slices.Contains(uids, string(vm.UID)) })
}

// policyOf is the policy an event goes by: the request's own, else the
// object's events.PolicyAnnotation, else the planner's default. An
// annotation that does not parse is refused with the reason; the default
// applies, and the rollout is paused before anything moves.
func (p *Planner) policyOf(asked *events.Policy, object events.Ref) (events.Policy, string) {
	if asked != nil {
		return *asked, ""
	}
	o, ok := p.cfg.Fleet.Object(object).(metav1.Object)
	if !ok {
		return p.cfg.Policy, ""
	}
	doc, ok := o.GetAnnotations()[events.PolicyAnnotation]
	if !ok {
		return p.cfg.Policy, ""
	}
	policy, err := events.ParsePolicy(doc)
	if err == nil && object.Namespace != "" {
		err = p.tenantWebhooks(policy)
	}
	if err != nil {
		return p.cfg.Policy, fmt.Sprintf("annotation %s on %s: %v", events.PolicyAnnotation, object, err)
	}
	return policy, ""
}

// tenantWebhooks refuses the webhooks of a policy a namespaced object's
// annotation sets (whoever may edit a namespace's instance types may set
// it) unless the operator allowed their hosts: kvlive would otherwise call
// any address a tenant names.
func (p *Planner) tenantWebhooks(policy events.Policy) error {
	var errs []error
	for _, url := range []string{policy.ConfirmWebhook, policy.CheckWebhook} {
		if url != "" {
			errs = append(errs, p.cfg.Webhooks.Permits(url))
		}
	}
	return errors.Join(errs...)
}

// awaitConfirm pauses a rollout whose policy names a confirm webhook,
// at its first planning, until the webhook answers about the first batch:
// its plans are parked as held, and the rollout controller asks the
// webhook off the planner's workers (a webhook that never answers holds
// its own rollout alone, never a worker) and resumes the rollout on a yes.
// It reports whether the plans are to be parked: whenever the rollout is
// not running (awaiting, or the webhook said no when the event comes
// again).
func (p *Planner) awaitConfirm(ctx context.Context, w work, plans []events.Plan, r rolloutPlan) (bool, error) {
	url := w.policy.ConfirmWebhook
	if url == "" || !slices.ContainsFunc(plans, func(pl events.Plan) bool { return pl.Batch == 0 && pl.Action.Moves() }) {
		return false, nil
	}
	store, err := rollout.Open(ctx, p.cfg.JetStream)
	if err != nil {
		return false, err
	}
	timeout, _ := events.ParseDuration(w.policy.WebhookTimeout)
	if timeout <= 0 {
		timeout = webhook.DefaultTimeout
	}
	why := fmt.Sprintf("batch 1 of %d: awaiting its confirm webhook's answer (%s, within %s)", max(len(r.batches), 1), webhook.Redact(url), timeout)
	c, err := store.AwaitConfirm(ctx, w.eventID, why, p.cfg.Clock.Now())
	if err != nil {
		return false, err
	}
	if c.Awaiting == events.AwaitingConfirm {
		p.cfg.Log.Info("rollout paused until its confirm webhook answers", "event", w.eventID, "webhook", webhook.Redact(url))
	}
	return c.State != events.StateRunning, nil
}

// holdForWindow pauses, ahead of its plans, a restart planned outside its
// restart window, until the window opens: its plans are parked as held.
func (p *Planner) holdForWindow(ctx context.Context, w work) error {
	window := w.policy.RestartWindow
	if w.target.Move != events.MoveRestart || window.IsZero() {
		return nil
	}
	now := p.cfg.Clock.Now()
	open, opens := window.At(now)
	if open {
		return nil
	}
	store, err := rollout.Open(ctx, p.cfg.JetStream)
	if err != nil {
		return err
	}
	if _, err := store.PauseUntil(ctx, w.eventID, rollout.WindowPause(window, opens), now, opens); err != nil {
		return err
	}
	p.cfg.Log.Info("restart planned outside its window: paused until it opens", "event", w.eventID, "opens", opens)
	return nil
}

// holdForPolicy pauses, ahead of its plans, an event whose policy
// annotation was refused, so nothing moves on a policy nobody asked for.
func (p *Planner) holdForPolicy(ctx context.Context, w work) error {
	if w.policyError == "" {
		return nil
	}
	store, err := rollout.Open(ctx, p.cfg.JetStream)
	if err != nil {
		return err
	}
	if _, _, err := store.Apply(ctx, w.eventID, events.ActionPause, w.policyError+"; fix it and replay the event, or resume to go on with the default policy",
		"kvlive planner", p.cfg.Clock.Now(), false); err != nil && !errors.Is(err, rollout.ErrAborted) {
		return err
	}
	p.cfg.Log.Warn("event paused: its rollout policy was refused", "event", w.eventID, "err", w.policyError)
	if o, ok := p.cfg.Fleet.Object(w.target.Object).(runtime.Object); ok && p.cfg.Recorder != nil {
		p.cfg.Recorder.Eventf(o, corev1.EventTypeWarning, "RolloutPolicyRefused", "rollout %s paused before anything moved: %s", w.eventID, w.policyError)
	}
	return nil
}
