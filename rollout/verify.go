package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/consumer"
	"kvlive/internal/telemetry"
)

// The verifier stores KubeVirt's verdict on every VM kvlive moved. It
// reads the outcomes stream through a durable consumer every replica
// shares and keeps each moved VM's outcome unacked until the VM's verdict
// is stored: the consumer's pending messages are the VMs awaiting a
// verdict, so a process that dies hands its VMs, after the ack wait, to
// whichever replica runs next. The verdict comes from the VM and VMI
// informers: every change to a VM awaited (or its VMI) queues the VM, and
// a worker judges it on the cache (instancetype.Judge); a VM is queued
// again at its deadline, when what stands is the verdict. A verdict is
// published only where its subject (one per VM and event) is empty, so a
// redelivered outcome or a second replica never stores a second one.

// VerifierFleet is what the verifier reads from the process's informer
// cache.
type VerifierFleet interface {
	VM(namespace, name string) *virtv1.VirtualMachine
	VMI(namespace, name string) *virtv1.VirtualMachineInstance
	VMInformer() cache.SharedIndexInformer
	VMIInformer() cache.SharedIndexInformer
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	Fleet     VerifierFleet
	JetStream jetstream.JetStream
	Log       *slog.Logger
	Tracer    trace.TracerProvider
	Clock     clock.PassiveClock
	Metrics   *telemetry.Metrics
	// Recorder, when set, records a Warning Event on a VM whose verdict
	// differs from kvlive's prediction.
	Recorder record.EventRecorder
	// Deadline is the verdict deadline of this process's applier; each
	// outcome carries the one it was moved under, which the verifier keeps.
	Deadline time.Duration
	// Workers is how many VMs are judged at once.
	Workers int
}

// awaited is one moved VM's outcome, unacked until its verdict is stored.
// It keeps the outcome's reply subject, not its message: a message holds
// its body and headers (some 3 KiB a VM, and a rollout may await 100,000
// VMs), and settling one is a publish to its reply subject (JetStream's
// ack protocol: "+ACK", "-NAK"; what jetstream.Msg's Ack and Nak send).
type awaited struct {
	out   events.Outcome
	reply string
	// seq is the outcome's stream sequence, which tells the outcome
	// delivered again from another attempt's outcome of the same VM.
	seq uint64
	// failed are the VM's migrations since the move seen failing, oldest
	// first.
	failed []events.MigrationRecord
}

// sawFailed keeps a failed migration the VMI shows on the awaited
// outcome a, once per migration.
func (v *Verifier) sawFailed(key string, a *awaited, m *events.MigrationRecord) {
	if m == nil || !m.Failed || slices.ContainsFunc(a.failed, func(f events.MigrationRecord) bool { return f.UID == m.UID }) {
		return
	}
	a.failed = append(slices.Clone(a.failed), *m)
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.byVM[key][awaitKey(a.out)]; ok && cur.seq == a.seq {
		v.byVM[key][awaitKey(a.out)] = *a
	}
}

// Bodies of JetStream's ack protocol: the acknowledgement, and the
// negative one that has the server deliver the message again at once.
var (
	ackBody = []byte("+ACK")
	nakBody = []byte("-NAK")
)

// settleAwaited acks or naks (body) the awaited outcome a, logging a
// failure as settle does.
func (v *Verifier) settleAwaited(a awaited, body []byte) {
	v.settleFailed(v.cfg.JetStream.Conn().Publish(a.reply, body), "vm", a.out.VM.String(), "event", a.out.EventID)
}

// Verifier stores KubeVirt's verdict on every VM kvlive moved.
type Verifier struct {
	cfg    VerifierConfig
	tracer trace.Tracer
	queue  workqueue.TypedRateLimitingInterface[string]
	// mu guards byVM: the outcomes awaiting a verdict, by VM
	// (namespace/name), then event id and VM UID (awaitKey): a VM deleted
	// and re-created under its name while an outcome of it is awaited has
	// both awaited, the first judged (and settled) as re-created.
	mu   sync.Mutex
	byVM map[string]map[string]awaited
	regs []cache.ResourceEventHandlerRegistration
	// outcomes is the stream verdicts are stored in, looked up once by Run.
	outcomes jetstream.Stream
}

// NewVerifier builds a Verifier and registers its informer handlers;
// nothing is judged until Run.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if cfg.Fleet == nil || cfg.JetStream == nil || cfg.Deadline <= 0 {
		return nil, errors.New("rollout: the verifier needs a fleet, JetStream and a deadline")
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
	v := &Verifier{cfg: cfg, tracer: cfg.Tracer.Tracer(tracerName), byVM: map[string]map[string]awaited{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kvlive-verifier"})}
	for _, inf := range []cache.SharedIndexInformer{cfg.Fleet.VMInformer(), cfg.Fleet.VMIInformer()} {
		reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    v.changed,
			UpdateFunc: func(_, obj any) { v.changed(obj) },
			DeleteFunc: v.changed,
		})
		if err != nil {
			return nil, fmt.Errorf("rollout: verifier handler: %w", err)
		}
		v.regs = append(v.regs, reg)
	}
	cfg.Metrics.VerdictsAwaited(v.Awaited)
	return v, nil
}

// Awaited is how many moved VMs this verifier awaits a verdict on.
func (v *Verifier) Awaited() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, byEvent := range v.byVM {
		n += len(byEvent)
	}
	return n
}

// changed queues a VM (or a VMI's VM) that is awaited.
func (v *Verifier) changed(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	v.mu.Lock()
	_, ok := v.byVM[key]
	v.mu.Unlock()
	if ok {
		v.queue.Add(key)
	}
}

// Run judges moved VMs until ctx ends. Outcomes still awaiting a verdict
// are then handed back (nak'ed) to whichever replica runs next; those of
// a process that dies come back after the consumer's ack wait.
func (v *Verifier) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer v.queue.ShutDown()
	defer v.removeHandlers()
	var err error
	if v.outcomes, err = v.cfg.JetStream.Stream(ctx, events.StreamOutcomes); err != nil {
		return fmt.Errorf("rollout: verifier: stream %s: %w", events.StreamOutcomes, err)
	}
	cons, err := v.cfg.JetStream.Consumer(ctx, events.StreamOutcomes, events.ConsumerVerifier)
	if err != nil {
		return fmt.Errorf("rollout: verifier consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) { v.receive(ctx, msg) },
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if ctx.Err() == nil {
				v.cfg.Log.Warn("verifier: consuming outcomes", "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("rollout: verifier consume: %w", err)
	}
	v.cfg.Log.Info("verifier started", "deadline", v.cfg.Deadline)
	var workers sync.WaitGroup
	for range v.cfg.Workers {
		workers.Go(func() {
			for v.judgeNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	v.drain(cc)
	v.queue.ShutDown()
	workers.Wait()
	v.handBack()
	return nil
}

// drainTimeout bounds how long a stopping verifier waits for the outcomes
// its client has taken from the server to be read.
const drainTimeout = 10 * time.Second

// drain stops consuming and reads what the client has taken from the
// server but not yet read (Drain, not Stop, which drops it): each is then
// awaited and handed back, where a dropped one would stay unacked until
// the ack wait, hours. One still unread at drainTimeout comes back then.
func (v *Verifier) drain(cc jetstream.ConsumeContext) {
	cc.Drain()
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	select {
	case <-cc.Closed():
	case <-timer.C:
		v.cfg.Metrics.Settled(events.ConsumerVerifier, consumer.OutcomeFailed)
		v.cfg.Log.Warn("verifier: outcomes taken from the server still unread when it stopped; they come again after the ack wait", "waited", drainTimeout)
	}
}

// handBack naks every outcome still awaiting a verdict, so another
// replica takes it at once.
func (v *Verifier) handBack() {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for key, byEvent := range v.byVM {
		for _, a := range byEvent {
			v.settleAwaited(a, nakBody)
			n++
		}
		delete(v.byVM, key)
	}
	if n > 0 {
		v.cfg.Log.Info("verifier stopped; moved VMs awaiting a verdict handed back", "vms", n)
	}
}

func (v *Verifier) removeHandlers() {
	for i, inf := range []cache.SharedIndexInformer{v.cfg.Fleet.VMInformer(), v.cfg.Fleet.VMIInformer()} {
		_ = inf.RemoveEventHandler(v.regs[i])
	}
}

// receive takes one outcome: a VM kvlive moved is awaited until its
// verdict is stored; any other outcome is acked at once.
func (v *Verifier) receive(ctx context.Context, msg jetstream.Msg) {
	var out events.Outcome
	if _, err := events.Decode(msg.Data(), events.TypeOutcome, &out); err != nil {
		v.deadLetter(ctx, msg, err.Error())
		return
	}
	if !out.Result.Moves() || out.VerdictDeadline <= 0 {
		v.settle(msg, msg.Ack) // nothing moved, or moved where verdicts are off
		return
	}
	if out.VM.UID == "" {
		v.deadLetter(ctx, msg, "an outcome of a moved VM without the VM's uid")
		return
	}
	var seq uint64
	if md, err := msg.Metadata(); err == nil {
		if md.NumDelivered > 1 && v.stored(ctx, out) {
			v.settle(msg, msg.Ack) // a replica that died stored it first
			return
		}
		seq = md.Sequence.Stream
	}
	key := out.VM.Namespace + "/" + out.VM.Name
	v.mu.Lock()
	byEvent := v.byVM[key]
	if byEvent == nil {
		byEvent = map[string]awaited{}
		v.byVM[key] = byEvent
	}
	if a, ok := byEvent[awaitKey(out)]; ok {
		if seq != 0 && a.seq == seq {
			// The awaited outcome itself, delivered again once the ack
			// wait passed: it stays unacked, settled from now on through
			// this delivery's reply subject.
			a.reply = msg.Reply()
			byEvent[awaitKey(out)] = a
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		v.settle(msg, msg.Ack) // another attempt's outcome: the first one awaits
		return
	}
	byEvent[awaitKey(out)] = awaited{out: out, reply: msg.Reply(), seq: seq}
	v.mu.Unlock()
	v.queue.Add(key)
	v.queue.AddAfter(key, out.FinishedAt.Add(out.VerdictDeadline).Sub(v.cfg.Clock.Now()))
}

// stored reports whether the VM's verdict for the outcome's event is
// stored already; an error reading it says no (the publish settles it).
func (v *Verifier) stored(ctx context.Context, out events.Outcome) bool {
	_, err := v.outcomes.GetLastMsgForSubject(ctx, events.VerdictSubject(out.VM.Namespace, out.VM.UID, out.EventID))
	return err == nil
}

// deadLetter keeps an outcome the verifier cannot read as a dead letter,
// with the reason, and terminates it; one it could not keep is redelivered.
func (v *Verifier) deadLetter(ctx context.Context, msg jetstream.Msg, reason string) {
	if err := consumer.DeadLetter(ctx, v.cfg.JetStream, events.ConsumerVerifier, msg, reason); err != nil {
		v.cfg.Metrics.DeadLetterFailed(events.ConsumerVerifier)
		v.cfg.Log.Warn("verifier: an unreadable outcome could not be dead-lettered; it comes again", "subject", msg.Subject(), "reason", reason, "err", err)
		v.settle(msg, func() error { return msg.NakWithDelay(time.Minute) })
		return
	}
	v.cfg.Metrics.Settled(events.ConsumerVerifier, consumer.OutcomeDeadLetter)
	v.cfg.Log.Warn("verifier: an unreadable outcome, dead-lettered", "subject", msg.Subject(), "reason", reason)
	v.settle(msg, msg.Term)
}

// settle acks, naks or terminates msg, logging a failure: the server then
// redelivers it after the ack wait, and the verdict's subject keeps it
// from being stored twice.
func (v *Verifier) settle(msg jetstream.Msg, do func() error) {
	v.settleFailed(do(), "subject", msg.Subject())
}

// settleFailed counts and logs err, a failure to settle the outcome what
// names, if any.
func (v *Verifier) settleFailed(err error, what ...any) {
	if err != nil {
		v.cfg.Metrics.Settled(events.ConsumerVerifier, consumer.OutcomeFailed)
		v.cfg.Log.Warn("verifier: settling an outcome failed; it comes again after the ack wait", append(what, "err", err)...)
	}
}

func (v *Verifier) judgeNext(ctx context.Context) bool {
	key, quit := v.queue.Get()
	if quit {
		return false
	}
	defer v.queue.Done(key)
	if err := v.judge(ctx, key); err != nil {
		if ctx.Err() == nil {
			v.cfg.Metrics.VerdictStoreFailed()
			v.cfg.Log.Warn("verifier: storing a verdict failed; it is tried again", "vm", key, "err", err)
			v.queue.AddRateLimited(key)
		}
		return true
	}
	v.queue.Forget(key)
	return true
}

// awaitKey is an awaited outcome's key among its VM's: its event and the
// VM's UID.
func awaitKey(o events.Outcome) string { return o.EventID + "/" + o.VM.UID }

// judge reads the verdict on each outcome awaited for the VM at key and
// stores every final one.
func (v *Verifier) judge(ctx context.Context, key string) error {
	namespace, name, _ := strings.Cut(key, "/")
	v.mu.Lock()
	pending := make([]awaited, 0, len(v.byVM[key]))
	for _, a := range v.byVM[key] {
		pending = append(pending, a)
	}
	v.mu.Unlock()
	vm, vmi := v.cfg.Fleet.VM(namespace, name), v.cfg.Fleet.VMI(namespace, name)
	now := v.cfg.Clock.Now()
	var errs []error
	for _, a := range pending {
		j, final := instancetype.Judge(a.out, vm, vmi, now, a.out.VerdictDeadline)
		v.sawFailed(key, &a, j.Migration)
		if !final {
			// The queue keeps one wake-up per VM, the earliest: this
			// outcome's own deadline may be later than the one that woke
			// it (a VM moved again while its last verdict was awaited),
			// and a VM queued for its migration is due later still.
			due := j.Due
			if due.IsZero() {
				due = a.out.FinishedAt.Add(a.out.VerdictDeadline)
			}
			v.queue.AddAfter(key, due.Sub(now))
			continue
		}
		if err := v.store(ctx, a, j, vm, now); err != nil {
			errs = append(errs, err)
			continue
		}
		v.mu.Lock()
		delete(v.byVM[key], awaitKey(a.out))
		if len(v.byVM[key]) == 0 {
			delete(v.byVM, key)
		}
		v.mu.Unlock()
		v.settleAwaited(a, ackBody)
	}
	return errors.Join(errs...)
}

// store publishes the verdict where none is stored, then records it: a
// span under the VM's apply span, a metric, and, where it differs from the
// prediction, a log line and a Warning Event on the VM.
func (v *Verifier) store(ctx context.Context, a awaited, j instancetype.Judgement, vm *virtv1.VirtualMachine, now time.Time) error {
	o := a.out
	verdict := events.Verdict{EventID: o.EventID, VM: o.VM, Predicted: o.Result, Observed: j.Observed, Reason: j.Reason,
		Condition: j.Condition, Message: j.Message, Batch: o.Batch, MovedAt: o.FinishedAt, ObservedAt: now.UTC(),
		Deadline: o.VerdictDeadline, TraceID: o.TraceID, SpanID: o.SpanID, Migration: j.Migration, FailedMigrations: a.failed}
	if before := failedBefore(verdict); len(before) > 0 {
		verdict.Reason += fmt.Sprintf("; %d failed migration(s) before it: %s", len(before), strings.Join(before, ", "))
	}
	id := events.VerdictID(o.EventID, o.VM.UID)
	body, err := events.Encode(events.TypeVerdict, id, "kvlive/verifier", o.VM.String(), now, &verdict)
	if err != nil {
		return err
	}
	m := events.NewMsg(events.VerdictSubject(o.VM.Namespace, o.VM.UID, o.EventID), id, events.TypeVerdict, body)
	_, err = v.cfg.JetStream.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(0))
	switch {
	case events.Conflict(err):
		return nil // stored already, by another replica or an earlier delivery
	case err != nil:
		return fmt.Errorf("verdict %s: %w", id, err)
	}
	v.record(ctx, verdict, vm)
	return nil
}

// failedBefore names the verdict's failed migrations other than the one
// it was read at (which its reason names already).
func failedBefore(v events.Verdict) []string {
	var out []string
	for _, f := range v.FailedMigrations {
		if v.Migration == nil || f.UID != v.Migration.UID {
			out = append(out, f.UID+" ("+f.FailureReason+")")
		}
	}
	return out
}

// record traces, counts and, on a mismatch, reports a stored verdict.
func (v *Verifier) record(ctx context.Context, verdict events.Verdict, vm *virtv1.VirtualMachine) {
	v.cfg.Metrics.Verdict(verdict.Predicted, verdict.Observed)
	if tid, err := trace.TraceIDFromHex(verdict.TraceID); err == nil {
		if sid, err := trace.SpanIDFromHex(verdict.SpanID); err == nil {
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
		}
	}
	vctx, span := v.tracer.Start(ctx, "verdict "+verdict.VM.String(), trace.WithTimestamp(verdict.MovedAt), trace.WithAttributes(
		attribute.String("kvlive.event.id", verdict.EventID), attribute.String("kvlive.predicted", string(verdict.Predicted)),
		attribute.String("kvlive.observed", string(verdict.Observed)), attribute.String("kvlive.verdict.reason", verdict.Reason),
		attribute.String("kvlive.kubevirt.condition", verdict.Condition), attribute.String("kvlive.kubevirt.message", verdict.Message)))
	// KubeVirt's live migrations that carried (or failed to carry) the
	// change, each from the source's start to its end (or the verdict).
	migrations := slices.Clone(verdict.FailedMigrations)
	if m := verdict.Migration; m != nil && !slices.ContainsFunc(migrations, func(f events.MigrationRecord) bool { return f.UID == m.UID }) {
		migrations = append(migrations, *m)
	}
	for _, m := range migrations {
		if m.Started == nil {
			continue
		}
		end := verdict.ObservedAt
		if m.Ended != nil {
			end = *m.Ended
		}
		_, ms := v.tracer.Start(vctx, "migration "+verdict.VM.String(), trace.WithTimestamp(*m.Started), trace.WithAttributes(
			attribute.String("kvlive.migration.uid", m.UID), attribute.String("kvlive.migration.target", m.Target),
			attribute.Bool("kvlive.migration.failed", m.Failed), attribute.String("kvlive.migration.failure", m.FailureReason),
			attribute.Bool("kvlive.migration.ended", m.Ended != nil)))
		ms.End(trace.WithTimestamp(end))
	}
	span.End(trace.WithTimestamp(verdict.ObservedAt))
	if verdict.Observed.Matches(verdict.Predicted) {
		return
	}
	v.cfg.Log.Warn("KubeVirt's verdict differs from kvlive's prediction", "event", verdict.EventID, "vm", verdict.VM.String(),
		"predicted", verdict.Predicted, "observed", verdict.Observed, "reason", verdict.Reason, "message", verdict.Message)
	if vm != nil && v.cfg.Recorder != nil && string(vm.UID) == verdict.VM.UID {
		v.cfg.Recorder.Eventf(vm, corev1.EventTypeWarning, "KvliveVerdictDiffers", "rollout %s: kvlive predicted %s, KubeVirt: %s (%s)",
			verdict.EventID, verdict.Predicted, verdict.Observed, verdict.Reason)
	}
}

// CountVerdicts fills in a's verdict counts from the verdicts stored on its
// event: each moved VM's (the latest outcome moved it) by verdict, those
// differing from the prediction, and the moved VMs still awaited. A
// complete rollout with verdicts awaited is verifying.
func CountVerdicts(ctx context.Context, js jetstream.JetStream, a *Account) error {
	stored, err := currentVerdicts(ctx, js, a.EventID)
	if err != nil {
		return err
	}
	a.Verdicts, a.Differ, a.Awaited = map[events.Observed]int{}, 0, 0
	for uid, o := range a.Latest {
		if !o.Result.Moves() {
			continue
		}
		v, ok := stored[uid]
		if !ok && o.VerdictDeadline <= 0 {
			continue // moved where verdicts are off: none is awaited
		}
		switch {
		case !ok:
			a.Awaited++
		default:
			a.Verdicts[v.Observed]++
			if !v.Observed.Matches(o.Result) {
				a.Differ++
			}
		}
	}
	if a.Phase == PhaseComplete && a.Awaited > 0 {
		a.Phase = PhaseVerifying
	}
	return nil
}

// currentVerdicts reads each VM's current verdict on eventID, by VM UID:
// the latest re-observation of it (kvlive rollout verify) where there is
// one, which is then the VM's verdict for status, gates and the restarts a
// rollout leaves pending; the first verdict stays stored as its history.
func currentVerdicts(ctx context.Context, js jetstream.JetStream, eventID string) (map[string]events.Verdict, error) {
	stored, err := storedVerdicts(ctx, js, eventID)
	if err != nil {
		return nil, err
	}
	again, err := latestReobserved(ctx, js, eventID)
	if err != nil {
		return nil, err
	}
	for uid, v := range again {
		if _, ok := stored[uid]; ok {
			stored[uid] = v
		}
	}
	return stored, nil
}

// storedVerdicts reads the verdicts stored on eventID's VMs, by VM UID.
func storedVerdicts(ctx context.Context, js jetstream.JetStream, eventID string) (map[string]events.Verdict, error) {
	stored := map[string]events.Verdict{}
	err := scanSubject(ctx, js, events.StreamOutcomes, events.VerdictsOf(eventID), func(m jetstream.Msg) {
		var v events.Verdict
		if _, err := events.Decode(m.Data(), events.TypeVerdict, &v); err == nil {
			stored[v.VM.UID] = v
		}
	})
	return stored, err
}
