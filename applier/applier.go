package applier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/bus"
	"kvlive/internal/consumer"
	"kvlive/internal/kube"
	"kvlive/internal/telemetry"
	"kvlive/rollout"
)

const tracerName = "kvlive/applier"

// Fleet is what the applier reads from the process's informer cache.
type Fleet interface {
	instancetype.Lookup
	instancetype.Objects
	// VM returns the cached VM namespace/name, or nil.
	VM(namespace, name string) *virtv1.VirtualMachine
	// Cluster is the KubeVirt CR's live-update configuration.
	Cluster() instancetype.Cluster
}

// DefaultQueueTimeout is how long a moved VM waits for the live migration
// that brings its change to the guest to start, when the config sets no
// QueueTimeout: KubeVirt runs five migrations at a time in a cluster, so a
// fleet's rollout takes hours, and a VM's turn may come late in it.
const DefaultQueueTimeout = 6 * time.Hour

// Config configures an Applier.
type Config struct {
	// Clients write the VMs and their revisions; Fleet is read from the cache.
	Clients   kube.Clients
	Fleet     Fleet
	JetStream jetstream.JetStream
	Log       *slog.Logger
	Tracer    trace.TracerProvider
	Clock     clock.PassiveClock
	// Workers is how many VMs are moved at once.
	Workers int
	// Rate caps VM moves per second across workers; zero means no cap
	// beyond the client's QPS and Burst.
	Rate float64
	// ObserveTimeout is the verdict deadline a moved VM's outcome carries:
	// how long the verifier (beside the applier) waits for KubeVirt's
	// verdict; zero turns verdicts off.
	ObserveTimeout time.Duration
	// QueueTimeout is how long a running VM whose change KubeVirt brings in
	// by a live migration (or an eviction) may wait for it to start before
	// its verdict is queued; the verdict deadline runs from the start.
	// Zero is DefaultQueueTimeout.
	QueueTimeout time.Duration
	// SlotReactions is how long after its move a VM that shows no
	// hot-plug yet keeps its slot of the migration budget (virt-controller
	// patches the VMI within milliseconds of the move). Zero is
	// DefaultSlotReactions; the fault soak shortens it, so a slot freed
	// before its VM's write shows within a scenario.
	SlotReactions time.Duration
	// Migrations, when set, paces live moves by the migration budget
	// (migrations.go): KubeVirt's parallelMigrationsPerCluster, or a
	// rollout policy's migrationBudget when lower.
	Migrations MigrationFleet
	Metrics    *telemetry.Metrics
	// Grace is how long VMs being moved may finish after ctx ends.
	Grace time.Duration
	// Recorder, when set, records Kubernetes Events on a batched rollout's
	// object: a batch released, a gate that paused or aborted it.
	Recorder record.EventRecorder
	// Activity, when set, records the plans in hand, for the revision
	// pruner to wait on.
	Activity *Activity
}

// waiter is what paces the applier's writes: it returns when the next
// write may go.
type waiter interface {
	Wait(ctx context.Context) error
}

// Applier consumes plans, moves VMs and publishes outcomes.
type Applier struct {
	cfg    Config
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// limiter paces writes (--rate); a *rate.Limiter, or a test's.
	limiter waiter
	// watch is every rollout's pause/abort state, kept current by Run;
	// control reads a record afresh where the watch may lag.
	watch   *rollout.Watch
	control *rollout.Store
	// budget paces live moves by KubeVirt's migration capacity (nil: no
	// pacing).
	budget *budget
	// known is what each event's rollout record says, once read
	// (knownRollout by event id).
	known *lru.Cache
	// reading makes the workers that meet a new rollout read its record
	// once between them.
	reading singleflight.Group
	// knownVMs counts the planned VMs the known rollouts hold in memory;
	// past knownVMsCap the least recently used rollouts are let go (and
	// read again when one of their plans comes).
	knownVMs    atomic.Int64
	knownVMsCap int64
	// slots cap each rollout's VMs in flight in this applier (MaxInFlight).
	slots *rolloutSlots
	// openReads are when each rollout's control record was last read open
	// (checkOpen).
	openReads openReads
}

// openReads remembers when a read last found each rollout open; the
// workers that meet a rollout whose last read is too old share the next.
type openReads struct {
	reading singleflight.Group
	mu      sync.Mutex
	at      map[string]time.Time
}

// fresh reports whether a read found eventID's rollout open less than
// openFor before now.
func (o *openReads) fresh(eventID string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.at[eventID]
	return ok && now.Sub(at) < openFor && !now.Before(at)
}

// found records that a read started at read found eventID's rollout open,
// letting go of reads too old to answer for anything.
func (o *openReads) found(eventID string, read time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.at == nil {
		o.at = map[string]time.Time{}
	}
	for id, at := range o.at {
		if read.Sub(at) >= openFor {
			delete(o.at, id)
		}
	}
	o.at[eventID] = read
}

// knownRollout is what the applier keeps of a rollout record.
type knownRollout struct {
	object      events.Ref
	maxInFlight int
	// migrationBudget is the policy's cap on its VMs migrating at once
	// (0: the process's budget), abortOnFailure its onFailure: abort.
	migrationBudget int
	abortOnFailure  bool
	// window is a restart rollout's restart window (zero: any time).
	window events.Window
	// batchOf is the batch of each VM the rollout planned, by a hash of
	// its UID (8 bytes a VM, not 36); nil for a record written before
	// kvlive listed the VMs.
	batchOf map[uint64]int32
	// move is what the rollout's plans do (its record's type), and
	// revertOf, for an undo, each VM's events.RevertDigest, by the same
	// key: a plan under the event's id that moves otherwise, or to another
	// revision or snapshot, is no plan of the planner's.
	move     events.Move
	revertOf map[uint64]uint64
}

// uidKey is the key of a VM in knownRollout.batchOf.
func uidKey(uid string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return h.Sum64()
}

// New builds an Applier; nothing runs until Run.
func New(cfg Config) (*Applier, error) {
	if cfg.Fleet == nil || cfg.JetStream == nil || cfg.Clients.Virt == nil || cfg.Clients.Kube == nil {
		return nil, errors.New("applier: clients, fleet and JetStream are required")
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
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = DefaultQueueTimeout
	}
	if cfg.SlotReactions <= 0 {
		cfg.SlotReactions = DefaultSlotReactions
	}
	limiter := rate.NewLimiter(rate.Inf, 1)
	if cfg.Rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(cfg.Rate), max(int(cfg.Rate), 1))
	}
	a := &Applier{cfg: cfg, tracer: cfg.Tracer.Tracer(tracerName), prop: propagation.TraceContext{}, limiter: limiter,
		slots: newRolloutSlots(), knownVMsCap: maxKnownVMs}
	a.known = lru.NewWithEvictionFunc(maxKnownRollouts, func(_ lru.Key, v any) {
		a.knownVMs.Add(-int64(len(v.(knownRollout).batchOf)))
	})
	return a, nil
}

// Run consumes plans until ctx ends. The fleet must be running.
func (a *Applier) Run(ctx context.Context) error {
	cons, err := a.cfg.JetStream.Consumer(ctx, events.StreamPlans, events.ConsumerApplier)
	if err != nil {
		return fmt.Errorf("applier: consumer: %w", err)
	}
	store, err := rollout.Open(ctx, a.cfg.JetStream)
	if err != nil {
		return fmt.Errorf("applier: %w", err)
	}
	a.control = store
	if a.watch, err = store.StartWatch(ctx, nil); err != nil {
		return fmt.Errorf("applier: %w", err)
	}
	if a.cfg.Migrations != nil {
		kv, err := a.cfg.JetStream.KeyValue(ctx, events.BucketBus)
		if err != nil {
			return fmt.Errorf("applier: migration budget: %w", err)
		}
		a.budget = newBudget(kv, a.cfg.Migrations)
		if err := a.budget.follow(ctx, a.cfg.Log); err != nil {
			return fmt.Errorf("applier: migration budget: %w", err)
		}
		go a.sweepSlots(ctx)
	}
	rt, err := consumer.New(consumer.Config{
		Stage: events.ConsumerApplier, Consumer: cons, JetStream: a.cfg.JetStream, Workers: a.cfg.Workers,
		MaxDeliver: events.ApplierMaxDeliver, Backoff: consumer.DefaultBackoff(), Grace: a.cfg.Grace,
		Log: a.cfg.Log, Metrics: a.cfg.Metrics,
	})
	if err != nil {
		return fmt.Errorf("applier: %w", err)
	}
	a.cfg.Log.Info("applier started", "workers", a.cfg.Workers)
	return rt.Run(ctx, a.handle)
}

// handle carries one plan out. The outcome is stored before the plan is
// settled; a transient failure is retried until the last delivery, which
// records a failed outcome and keeps the plan as a dead letter.
func (a *Applier) handle(ctx context.Context, msg jetstream.Msg, d consumer.Delivery) consumer.Fate {
	a.cfg.Activity.begin()
	defer func() { a.cfg.Activity.end(a.cfg.Clock.Now()) }()
	ctx = a.prop.Extract(ctx, events.HeaderCarrier(msg.Headers()))
	var plan events.Plan
	if _, err := events.Decode(msg.Data(), events.TypePlan, &plan); err != nil {
		return consumer.Poison(err.Error())
	}
	known, err := a.checkPlanned(ctx, plan)
	if err != nil {
		if errors.Is(err, errNotPlanned) {
			a.cfg.Log.Warn("applier: a plan no planner made, dead-lettered", "event", plan.EventID, "vm", plan.VM.String(), "err", err)
			return consumer.Poison(err.Error())
		}
		return consumer.Retry(err)
	}
	release, err := a.slots.take(ctx, plan.EventID, known.maxInFlight)
	if err != nil {
		return consumer.Retry(fmt.Errorf("waiting for one of rollout %s's %d slots: %w", plan.EventID, known.maxInFlight, err))
	}
	defer release()
	if d.Attempt > 1 {
		// An earlier delivery may have stored its outcome and been cut
		// off before its ack; the world may have moved on since (another
		// rollout moved the VM), and what this one found would then
		// stand, latest, over what happened.
		recorded, err := a.recorded(ctx, plan, d.Attempt)
		if err != nil {
			return consumer.Retry(fmt.Errorf("reading whether an earlier delivery recorded %s's outcome: %w", plan.VM.String(), err))
		}
		if recorded != nil {
			a.cfg.Log.Info("applier: plan redelivered after its outcome was stored; the outcome stands", "event", plan.EventID, "vm", plan.VM.String(),
				"result", recorded.Result, "attempt", recorded.Attempt)
			return consumer.Done()
		}
	}
	held, aborted := a.controlled(ctx, msg, plan, d)
	if held != nil {
		return *held
	}
	t := &turn{budget: known.migrationBudget, lastTry: d.Attempt >= events.ApplierMaxDeliver}
	ctx = withTurn(ctx, t)
	started := a.cfg.Clock.Now()
	ctx, span := a.startSpan(ctx, msg, plan, d.Attempt)
	out, retry := a.carryOut(ctx, msg, plan, d, span, aborted)
	if retry != nil {
		span.End()
		return *retry
	}
	a.complete(&out, plan, d, span)
	if t.tookSlot && !out.Wrote && out.MovedAfter.IsZero() {
		// Nothing moved: no migration of kvlive's doing comes. A write whose
		// answer was lost (a timeout after the API server carried it out)
		// moved the VM all the same: the try after it found the VM at the
		// target (MovedAfter), and its migration holds the slot.
		a.giveBack(ctx, plan)
	}
	if err := a.publishOutcome(ctx, out); err != nil {
		// The VM may have moved; the redelivery finds it at the target and
		// records the outcome without writing again.
		span.End()
		return consumer.Retry(fmt.Errorf("outcome of %s not stored: %w", plan.VM.String(), err))
	}
	a.cfg.Metrics.Outcome(out.Result, a.cfg.Clock.Since(started))
	span.End() // KubeVirt's verdict is the verifier's, on a span of its own under this one
	if out.Result == events.ResultFailed && d.Last {
		// Kept as a dead letter too, which `kvlive dlq retry` sends back
		// once the cause is fixed.
		return consumer.Poison(out.Reason + ": " + out.Error)
	}
	return consumer.Done()
}

// recorded returns the outcome an earlier delivery (before attempt) of
// the plan stored, or nil. It reads the event's outcomes in the VM's
// namespace, which only a redelivery pays for.
func (a *Applier) recorded(ctx context.Context, plan events.Plan, attempt int) (*events.Outcome, error) {
	var found *events.Outcome
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.OutcomeSubject(plan.VM.Namespace, plan.EventID)}}
	err := bus.Scan(ctx, a.cfg.JetStream, events.StreamOutcomes, cfg, func(m jetstream.Msg) {
		var o events.Outcome
		if _, err := events.Decode(m.Data(), events.TypeOutcome, &o); err != nil {
			return
		}
		if o.EventID == plan.EventID && o.VM.UID == plan.VM.UID && o.Attempt < attempt {
			found = &o
		}
	})
	return found, err
}

// errNotPlanned marks a plan that kvlive's planner did not make.
var errNotPlanned = errors.New(events.ReasonNotPlanned)

// maxKnownRollouts bounds the rollout records the applier remembers, and
// maxKnownVMs the planned VMs of their lists it keeps (about 40 bytes a VM
// in the map: some 40 MiB).
const (
	maxKnownRollouts = 4096
	maxKnownVMs      = 1 << 20
)

// checkPlanned makes sure a plan comes from kvlive's planner: its event has
// a rollout record (the planner writes it before any plan) whose object is
// the plan's target, and which lists the plan's VM in the plan's batch.
// Anything else, published by whoever can reach the plans subjects, is
// dead-lettered and writes nothing.
func (a *Applier) checkPlanned(ctx context.Context, plan events.Plan) (knownRollout, error) {
	r, err := a.knownRollout(ctx, plan.EventID)
	if err != nil {
		return r, err
	}
	if err := a.checkOpen(ctx, plan.EventID); err != nil {
		return r, err
	}
	if r.object != plan.Target.Object {
		return r, fmt.Errorf("%w: event %s rolls %s out, the plan targets %s", errNotPlanned, plan.EventID, r.object, plan.Target.Object)
	}
	if r.batchOf == nil {
		return r, nil
	}
	key := uidKey(plan.VM.UID)
	batch, listed := r.batchOf[key]
	switch {
	case !listed:
		return r, fmt.Errorf("%w: rollout %s did not plan VM %s (uid %s)", errNotPlanned, plan.EventID, plan.VM, plan.VM.UID)
	case int(batch) != plan.Batch:
		return r, fmt.Errorf("%w: rollout %s planned VM %s in batch %d, the plan says batch %d", errNotPlanned, plan.EventID, plan.VM, batch+1, plan.Batch+1)
	case plan.Action.Moves() && r.move != "" && plan.Target.Move != r.move:
		return r, fmt.Errorf("%w: rollout %s is a %s, the plan for VM %s a %s", errNotPlanned, plan.EventID, r.move, plan.VM, plan.Target.Move)
	case plan.Action.Moves() && events.RevertDigest(plan.Target) != r.revertOf[key]:
		return r, fmt.Errorf("%w: rollout %s did not plan VM %s back to %s with that snapshot", errNotPlanned, plan.EventID, plan.VM, plan.Target.Revision)
	}
	return r, nil
}

// openFor is how long a read of a rollout's control record that found it
// open answers for the rollout's next plans: the workers of a rollout of
// thousands of VMs read the record a few times a second between them, not
// once per VM. A keeper marks a rollout settled only after it has been
// quiet for rollout.MinQuiet at least, so a read this recent was made
// while the rollout was busy; the window only lengthens by openFor the one
// in which a plan of a finished rollout not yet marked still moves a VM.
const openFor = rollout.MinQuiet / 4

// checkOpen refuses a plan of a rollout that has settled: the planner
// sends none after that. The record is read, not taken from the watch: a
// watch lags the keeper's mark by however long NATS takes to deliver it,
// and a plan taken in that window would move a VM after the rollout
// settled (seen under load in TestAPlanAfterTheRolloutSettledMovesNothing).
// A read that found the rollout open answers for openFor (workers meeting
// it meanwhile share one read); one that found it settled answers for no
// one after: `kvlive dlq retry` may reopen the rollout at any time.
func (a *Applier) checkOpen(ctx context.Context, eventID string) error {
	if a.control == nil {
		return nil
	}
	if a.openReads.fresh(eventID, a.cfg.Clock.Now()) {
		return nil
	}
	v, err, _ := a.openReads.reading.Do(eventID, func() (any, error) {
		read := a.cfg.Clock.Now()
		c, _, err := a.control.Get(ctx, eventID)
		if err == nil && !c.Settled.IsZero() {
			// Refused on the leader's word only: a replica behind it
			// may still show the mark `kvlive dlq retry` just lifted.
			c, err = a.control.GetAtLeader(ctx, eventID)
		}
		if err == nil && c.Settled.IsZero() {
			a.openReads.found(eventID, read)
		}
		return c, err
	})
	c, _ := v.(events.Control)
	switch {
	case errors.Is(err, rollout.ErrUnreadable):
		return nil // holds no mark to refuse by; rollout status reports it
	case err != nil:
		return err
	case c.Settled.IsZero():
		return nil
	}
	return fmt.Errorf("%w: rollout %s settled at %s, and the planner sends no plan after that (kvlive dlq retry of this plan reopens the rollout)",
		errNotPlanned, eventID, c.Settled.Format(time.RFC3339))
}

// knownRollout is what eventID's rollout record says, read once.
func (a *Applier) knownRollout(ctx context.Context, eventID string) (knownRollout, error) {
	if v, ok := a.known.Get(eventID); ok {
		return v.(knownRollout), nil
	}
	v, err, _ := a.reading.Do(eventID, func() (any, error) {
		rec, ok, err := rollout.Record(ctx, a.cfg.JetStream, eventID)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, fmt.Errorf("%w: event %s has no rollout record (forged, or recorded longer ago than the replay horizon)", errNotPlanned, eventID)
		}
		r := knownRollout{object: rec.Object, maxInFlight: rec.Policy.MaxInFlight, window: rec.Policy.RestartWindow, move: events.Move(rec.Type),
			migrationBudget: rec.Policy.MigrationBudget, abortOnFailure: rec.Policy.OnFailure == events.OnFailureAbort}
		vms, listed, err := rollout.PlannedVMs(ctx, a.cfg.JetStream, rec)
		if err != nil {
			return nil, err
		}
		if listed {
			r.batchOf = make(map[uint64]int32, len(vms))
			for _, vm := range vms {
				r.batchOf[uidKey(vm.UID)] = int32(vm.Batch)
				if vm.Revert != 0 {
					if r.revertOf == nil {
						r.revertOf = map[uint64]uint64{}
					}
					r.revertOf[uidKey(vm.UID)] = vm.Revert
				}
			}
		}
		a.remember(eventID, r)
		return r, nil
	})
	if err != nil {
		return knownRollout{}, err
	}
	return v.(knownRollout), nil
}

// remember keeps r, letting the least recently used rollouts go while the
// VMs the known rollouts list are more than knownVMsCap (the one just read
// stays, whatever its size).
func (a *Applier) remember(eventID string, r knownRollout) {
	if _, ok := a.known.Get(eventID); ok {
		return
	}
	a.known.Add(eventID, r)
	a.knownVMs.Add(int64(len(r.batchOf)))
	for a.knownVMs.Load() > a.knownVMsCap && a.known.Len() > 1 {
		a.known.RemoveOldest()
	}
}

// carryOut moves the VM, or records why not. A plan whose rollout was
// paused or aborted while the VM waited its turn is held, skipped, or,
// running again already, carried on without using up a delivery. A
// non-nil fate settles the plan without an outcome (held, or retried).
func (a *Applier) carryOut(ctx context.Context, msg jetstream.Msg, plan events.Plan, d consumer.Delivery, span trace.Span, aborted *events.Outcome) (events.Outcome, *consumer.Fate) {
	if aborted != nil {
		return a.abort(ctx, plan, d, *aborted)
	}
	if moved, err := a.passedThrough(ctx, plan, d); err != nil {
		retry := consumer.Retry(fmt.Errorf("%s: reading whether an earlier delivery moved the VM: %w", plan.VM.String(), err))
		return events.Outcome{}, &retry
	} else if moved != nil {
		return *moved, nil
	}
	out, err := a.apply(ctx, plan)
	if errors.Is(err, errOutsideWindow) {
		// Paused until the window opens: parked like any paused plan.
		span.AddEvent("outside the restart window")
		f := a.hold(ctx, msg, plan, d)
		return out, &f
	}
	for steered := 0; errors.Is(err, errSteered) && steered < maxReplans; steered++ {
		span.AddEvent("rollout paused or aborted while the VM waited its turn")
		held, aborted := a.controlled(ctx, msg, plan, d)
		if held != nil {
			return out, held
		}
		if aborted != nil {
			return a.abort(ctx, plan, d, *aborted)
		}
		out, err = a.apply(ctx, plan)
	}
	if err == nil {
		return out, nil
	}
	span.RecordError(err)
	if !d.Last || ctx.Err() != nil {
		retry := consumer.Retry(fmt.Errorf("%s: %w", plan.VM.String(), err))
		return out, &retry
	}
	return events.Outcome{Result: events.ResultFailed, Error: err.Error(), Reason: fmt.Sprintf("gave up after %d attempts", d.Attempt)}, nil
}

// abort records the plan of an aborted rollout as skipped, unless the VM
// is at the target already: an earlier delivery (or a first one that lost
// its ack) moved it before the abort, and a VM that moved is recorded as
// moved, never as "aborted before the VM moved". A failed read is retried.
func (a *Applier) abort(ctx context.Context, plan events.Plan, d consumer.Delivery, skipped events.Outcome) (events.Outcome, *consumer.Fate) {
	moved, err := a.atTarget(ctx, plan)
	if err != nil {
		if d.Last {
			return events.Outcome{Result: events.ResultFailed, Error: err.Error(), Reason: "rollout aborted; could not read whether the VM had moved"}, nil
		}
		retry := consumer.Retry(fmt.Errorf("%s: rollout aborted; reading whether the VM moved: %w", plan.VM.String(), err))
		return events.Outcome{}, &retry
	}
	if moved != nil {
		return *moved, nil
	}
	if moved, err = a.passedThrough(ctx, plan, d); err != nil {
		retry := consumer.Retry(fmt.Errorf("%s: rollout aborted; reading whether an earlier delivery moved the VM: %w", plan.VM.String(), err))
		return events.Outcome{}, &retry
	} else if moved != nil {
		return *moved, nil
	}
	return skipped, nil
}

// passedThrough tells, on a redelivery, a re-pin or an undo's move back
// an earlier delivery made before it was cut off unrecorded, when another
// rollout has moved the VM on since: the VM is neither where the plan found
// it nor at its target, and an outcome of another rollout, stored after
// this plan, moved it from this plan's target revision. For a re-pin that
// is the VM's snapshot of the plan's generation, where only this plan
// moves it; for an undo, the revision the VM left for the rollout undone,
// which it was on again only after this plan was stored (the plan found
// it on the rollout's). Nil when there is no such evidence: the usual
// checks then decide.
func (a *Applier) passedThrough(ctx context.Context, plan events.Plan, d consumer.Delivery) (*events.Outcome, error) {
	t := plan.Target
	repin, undo := t.Move == events.MoveRepin && t.Generation != 0, t.Move == events.MoveRevert && t.Revision != ""
	if d.Attempt < 2 || !plan.Action.Moves() || (!repin && !undo) {
		return nil, nil
	}
	vm := a.cfg.Fleet.VM(plan.VM.Namespace, plan.VM.Name)
	if vm == nil || string(vm.UID) != plan.VM.UID {
		return nil, nil
	}
	want := t.Revision
	if repin {
		want = targetRevision(vm, t)
	}
	if pin, err := instancetype.PinOf(vm, t.Object.IsPreference()); err != nil || pin.Revision == want || pin.Revision == t.FromRevision {
		return nil, nil
	}
	var by *events.Outcome
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.OutcomesIn(plan.VM.Namespace)}}
	err := bus.Scan(ctx, a.cfg.JetStream, events.StreamOutcomes, cfg, func(m jetstream.Msg) {
		var o events.Outcome
		if by != nil {
			return
		}
		if _, err := events.Decode(m.Data(), events.TypeOutcome, &o); err != nil {
			return
		}
		if o.VM.UID == plan.VM.UID && o.EventID != plan.EventID && o.From == want && !o.FinishedAt.Before(d.Stored) {
			by = &o
		}
	})
	if err != nil || by == nil {
		return nil, err
	}
	from := t.FromRevision
	if repin {
		from = a.movedFrom(ctx, vm.Namespace, want, t.FromRevision)
	}
	return &events.Outcome{Result: plan.Action, Revision: want, From: from, Changes: plan.Changes,
		Reason: joinReason(fmt.Sprintf("moved by an earlier attempt, which was cut off before it recorded it; rollout %s has moved it on since, from this rollout's target", by.EventID), plan.Reason)}, nil
}

// complete fills in the outcome's identity and trace, and marks the span.
func (a *Applier) complete(out *events.Outcome, plan events.Plan, d consumer.Delivery, span trace.Span) {
	out.EventID, out.VM, out.Attempt, out.Batch = plan.EventID, plan.VM, d.Attempt, plan.Batch
	if out.Changes == nil && out.Result == plan.Action {
		out.Changes = plan.Changes
	}
	sc := span.SpanContext()
	out.TraceID, out.SpanID = sc.TraceID().String(), sc.SpanID().String()
	out.FinishedAt = a.cfg.Clock.Now().UTC()
	if out.Result.Moves() && !out.Wrote && !d.Stored.IsZero() && d.Stored.Before(out.FinishedAt) {
		out.MovedAfter = d.Stored.UTC()
	}
	switch {
	case out.Result.Moves() && a.cfg.ObserveTimeout > 0:
		// A restart's outcome carries its old VMI's grace period: its
		// verdict waits for the shutdown, then for the boot.
		out.VerdictDeadline += a.cfg.ObserveTimeout
		if out.Stopped == "" && (out.Result == events.ResultLive || out.Result == events.ResultEvict) {
			out.QueueDeadline = a.cfg.QueueTimeout
		}
	default:
		out.VerdictDeadline = 0
	}
	span.SetAttributes(attribute.String("kvlive.result", string(out.Result)), attribute.Bool("kvlive.wrote", out.Wrote),
		attribute.StringSlice("kvlive.changes", changeStrings(out.Changes)))
	if out.Reason != "" {
		span.SetAttributes(attribute.String("kvlive.reason", out.Reason))
	}
	if out.Result == events.ResultFailed {
		span.SetStatus(codes.Error, out.Error)
	}
}

// startSpan starts the VM's apply span: a child of the plan span, or, when
// the planner asked for it (a large fan-out), the root of a trace of its
// own linked to the plan span.
func (a *Applier) startSpan(ctx context.Context, msg jetstream.Msg, plan events.Plan, attempt int) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("kvlive.event.id", plan.EventID),
			attribute.String("k8s.namespace.name", plan.VM.Namespace),
			attribute.String("kubevirt.vm.name", plan.VM.Name),
			attribute.String("kvlive.target", plan.Target.Object.String()),
			attribute.Int64("kvlive.generation", plan.Target.Generation),
			attribute.String("kvlive.plan.action", string(plan.Action)),
			attribute.Int("kvlive.attempt", attempt),
		),
	}
	if msg.Headers().Get(events.HeaderTraceRoot) != "" {
		if parent := trace.SpanContextFromContext(ctx); parent.IsValid() {
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: parent}))
		}
	}
	return a.tracer.Start(ctx, "applier.apply "+plan.VM.String(), opts...)
}

func changeStrings(changes []events.Change) []string {
	out := make([]string, 0, len(changes))
	for _, c := range changes {
		out = append(out, fmt.Sprintf("%s %s→%s (%s)", c.Field, c.From, c.To, c.Class))
	}
	return out
}

// outcomeRetryBudget bounds how long the applier keeps storing one outcome
// through a NATS failover (a stream leader lost, its successor not elected
// yet) before it gives the delivery back: a failover should not cost the
// plan a delivery and the record its "wrote: true".
const outcomeRetryBudget = time.Minute

func (a *Applier) publishOutcome(ctx context.Context, out events.Outcome) error {
	id := events.OutcomeID(out.EventID, out.VM.UID, out.Attempt)
	body, err := events.Encode(events.TypeOutcome, id, "kvlive/applier", out.VM.String(), out.FinishedAt, &out)
	if err != nil {
		return err
	}
	// The Nats-Msg-Id is the outcome's id and a nonce of this call: the
	// stream still drops a retried publish below, while an outcome someone
	// published ahead under the id the applier would use cannot stand in
	// for the real one.
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	m := events.NewMsg(events.OutcomeSubject(out.VM.Namespace, out.EventID), id+"#"+hex.EncodeToString(nonce[:]), events.TypeOutcome, body)
	a.prop.Inject(ctx, events.HeaderCarrier(m.Header))
	deadline := a.cfg.Clock.Now().Add(outcomeRetryBudget)
	backoff := consumer.DefaultBackoff()
	for attempt := 1; ; attempt++ {
		// The same Nats-Msg-Id each time: a publish that was stored but
		// not acknowledged is not stored twice.
		_, err := a.cfg.JetStream.PublishMsg(ctx, m)
		if err == nil {
			return nil
		}
		if !events.Transient(err) || ctx.Err() != nil || a.cfg.Clock.Now().After(deadline) {
			return fmt.Errorf("applier: publish outcome %s: %w", id, err)
		}
		a.cfg.Log.Warn("applier: storing an outcome failed, retrying", "outcome", id, "attempt", attempt, "err", err)
		a.cfg.Metrics.OutcomeRetry()
		select {
		case <-time.After(backoff.Delay(attempt)):
		case <-ctx.Done():
			return fmt.Errorf("applier: publish outcome %s: %w", id, ctx.Err())
		}
	}
}
