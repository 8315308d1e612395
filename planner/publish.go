package planner

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/rollout"
)

// rolloutPlan is what publishPlans published: the plans per result and the
// batch sizes of the VMs that move.
type rolloutPlan struct {
	counts  map[events.Result]int
	batches []int
}

// planAll plans every VM and splits the VMs that move into the policy's
// batches, in its order.
func (p *Planner) planAll(w work) ([]events.Plan, rolloutPlan) {
	plans := w.plans
	if plans == nil {
		plans = make([]events.Plan, 0, len(w.vms))
		for _, vm := range w.vms {
			plans = append(plans, instancetype.PlanVM(p.cfg.Fleet, w.eventID, w.target, vm))
		}
	}
	for i := range plans {
		plans[i] = rollout.WithPolicy(plans[i], w.policy)
	}
	r := rolloutPlan{counts: map[events.Result]int{}, batches: rollout.AssignBatches(plans, w.vms, w.policy)}
	for _, plan := range plans {
		r.counts[plan.Action]++
	}
	return plans, r
}

// publishPlans publishes the plans: the first batch's, and those of VMs
// that do not move, to the plans stream; later batches' to the staged
// stream, where each waits for its batch to be released. An event paused
// ahead (its policy refused, or rollout pause --ahead) has its first batch
// parked in the held stream, for rollout resume to release. The plans of
// each stream go as one fast batch where the stream takes them
// (publishBatch), else one by one, asynchronously; it returns once the
// server has acknowledged every plan. Plans carry deterministic Msg-Ids,
// so a retry after a partial failure or a crash is deduplicated by the
// stream, in a batch as one by one.
func (p *Planner) publishPlans(ctx context.Context, w work, plans []events.Plan) error {
	ctx, span := p.tracer.Start(ctx, "publish plans", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.destination.name", events.StreamPlans), attribute.Int("messaging.batch.message_count", len(plans))))
	defer span.End()
	now := p.cfg.Clock.Now()
	ownTraces := len(plans) > p.cfg.TraceFanout
	// Each plan is encoded as it goes out, not all of them first: the
	// rollout is recorded, and a plan of it in no stream yet reads as a
	// VM unaccounted for (encoding 100,000 plans takes seconds).
	message := func(plan *events.Plan) (*nats.Msg, error) { return p.planMessage(ctx, w, plan, now, ownTraces) }
	var streams []string // in the order of their first plan
	for i := range plans {
		if s := planStream(w, &plans[i]); !slices.Contains(streams, s) {
			streams = append(streams, s)
		}
	}
	var futures []jetstream.PubAckFuture
	for _, stream := range streams {
		each := func(yield func(*events.Plan) bool) {
			for i := range plans {
				if planStream(w, &plans[i]) == stream && !yield(&plans[i]) {
					return
				}
			}
		}
		batched, err := p.batched(ctx, stream)
		if err != nil {
			return err
		}
		if batched {
			err := p.publishBatch(ctx, stream, each, message)
			if !refusesBatches(err) {
				if err != nil {
					return err
				}
				continue
			}
			// The stream was made again without batches since it was
			// read (its server older, or an operator's change): one by
			// one from now on.
			p.cfg.Log.Info("the stream takes no batch publishes; publishing plans one by one", "stream", stream)
			p.batchable.Store(stream, false)
		}
		for plan := range each {
			m, err := message(plan)
			if err != nil {
				return err
			}
			f, err := p.cfg.JetStream.PublishMsgAsync(m)
			if err != nil {
				return fmt.Errorf("planner: publish plan %s: %w", m.Header.Get(jetstream.MsgIDHeader), err)
			}
			futures = append(futures, f)
		}
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("planner: plan %s not stored: %w", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// planMessage is plan as published: its CloudEvents envelope made at now,
// its Msg-Id, the trace context of ctx, and, with ownTrace, the mark that
// its VM's spans start a trace of their own.
func (p *Planner) planMessage(ctx context.Context, w work, plan *events.Plan, now time.Time, ownTrace bool) (*nats.Msg, error) {
	id := events.PlanID(w.eventID, plan.VM.UID)
	body, err := events.Encode(events.TypePlan, id, "kvlive/planner", plan.VM.String(), now, plan)
	if err != nil {
		return nil, err
	}
	m := events.NewMsg(planSubject(w, plan), id, events.TypePlan, body)
	p.prop.Inject(ctx, events.HeaderCarrier(m.Header))
	if ownTrace {
		m.Header.Set(events.HeaderTraceRoot, "true")
	}
	return m, nil
}

// planStream is the stream plan goes to: the staged stream for a later
// batch's, the held stream for a rollout paused ahead (parked, so no
// applier moves a VM before its watch of the control records sees the
// pause), else the plans stream.
func planStream(w work, plan *events.Plan) string {
	switch {
	case plan.Batch > 0:
		return events.StreamStaged
	case w.parked:
		return events.StreamHeld
	}
	return events.StreamPlans
}

// planSubject is plan's subject in planStream(w, plan).
func planSubject(w work, plan *events.Plan) string {
	switch planStream(w, plan) {
	case events.StreamStaged:
		return events.StagedSubject(plan.Batch, w.eventID)
	case events.StreamHeld:
		return events.HeldSubject(plan.VM.Namespace, w.eventID)
	}
	return events.PlanSubject(plan.VM.Namespace, w.eventID)
}

// batched reports whether stream takes fast batch publishes: events.Setup
// allows them on the work streams, and a nats-server older than 2.14 drops
// the flag. Read once per stream.
func (p *Planner) batched(ctx context.Context, stream string) (bool, error) {
	if ok, read := p.batchable.Load(stream); read {
		return ok.(bool), nil
	}
	s, err := p.cfg.JetStream.Stream(ctx, stream)
	if err != nil {
		return false, fmt.Errorf("planner: stream %s: %w", stream, err)
	}
	ok := s.CachedInfo().Config.AllowBatchPublish
	p.batchable.Store(stream, ok)
	return ok, nil
}

// refusesBatches reports whether err is a stream's refusal of fast batch
// publishes.
func refusesBatches(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeFastBatchNotEnabled
}

// publishBatch publishes plans to stream as one fast batch (JetStream's
// fast ingest), each made a message (message) as it goes out. The server
// stores each as it comes, acks every hundred or so rather than each, and
// skips one whose Msg-Id it has stored within the duplicate window, as it
// does one published alone. It returns once the server has acknowledged
// the whole batch; a message the server refuses ends the batch with an
// error.
func (p *Planner) publishBatch(ctx context.Context, stream string, plans iter.Seq[*events.Plan], message func(*events.Plan) (*nats.Msg, error)) error {
	fp, err := jetstreamext.NewFastPublisher(p.cfg.JetStream, jetstreamext.WithFastPublisherErrorHandler(func(err error) {
		p.cfg.Log.Warn("the server refused a plan of a batch: the batch fails, and the event is tried again", "stream", stream, "err", err)
	}))
	if err != nil {
		return fmt.Errorf("planner: publish plans to %s: %w", stream, err)
	}
	defer func() {
		if !fp.IsClosed() {
			// Left early: what was sent is stored; end the batch rather
			// than leave the server waiting out its timeout.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, _ = fp.Close(cctx)
			cancel()
		}
	}()
	sent := 0
	for plan := range plans {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := message(plan)
		if err != nil {
			return err
		}
		if _, err := fp.AddMsg(m); err != nil {
			return fmt.Errorf("planner: publish plan %s: %w", m.Header.Get(jetstream.MsgIDHeader), err)
		}
		sent++
	}
	ack, err := fp.Close(ctx)
	if err != nil {
		return fmt.Errorf("planner: %d plans to %s not acknowledged: %w", sent, stream, err)
	}
	if ack.BatchSize != uint64(sent) {
		return fmt.Errorf("planner: %s acknowledged %d of the %d plans of a batch", stream, ack.BatchSize, sent)
	}
	return nil
}

// recordRollout stores how many plans the event produces, by result, its
// policy and batches, and the VMs planned with their batches, so progress,
// gates and completion can be read without scanning the plans stream, and
// the applier can refuse a plan the planner did not make. It is written
// before the plans: an applier moves a VM only for a plan its rollout
// lists.
//
// The first planning of an event is its record. When the event was
// recorded before (a redelivery after a lost ack or a partial publish, a
// replica that restarted mid-planning), it is not planned into new batches:
// the plans published are those of the recorded VMs, each in its recorded
// batch (asRecorded).
func (p *Planner) recordRollout(ctx context.Context, w work, plans []events.Plan, plan rolloutPlan) ([]events.Plan, error) {
	total := 0
	for _, n := range plan.counts {
		total += n
	}
	r := events.Rollout{
		EventID: w.eventID, Type: string(w.target.Move), Object: w.target.Object,
		Planned: total, Counts: plan.counts, PlannedAt: p.cfg.Clock.Now().UTC(),
		Policy: w.policy, PolicyError: w.policyError, Batches: plan.batches, Supersedes: w.supersedes,
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.TraceID, r.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	vms := make([]events.PlannedVM, len(plans))
	for i, pl := range plans {
		vms[i] = events.PlannedVM{VMRef: pl.VM, Batch: pl.Batch, Revert: events.RevertDigest(pl.Target)}
	}
	stood, created, err := rollout.Create(ctx, p.cfg.JetStream, r, vms)
	if err != nil || created {
		return plans, err
	}
	if settled, err := p.settledAt(ctx, w.eventID); err != nil || !settled.IsZero() {
		if err == nil {
			trace.SpanFromContext(ctx).AddEvent("planned before and settled: nothing to publish again")
			p.cfg.Log.Info("event planned before and its rollout settled; nothing to publish again", "event", w.eventID, "settled", settled)
		}
		return nil, err
	}
	trace.SpanFromContext(ctx).AddEvent("planned before: publishing the recorded plans", trace.WithAttributes(attribute.String("kvlive.planned_at", stood.PlannedAt.String())))
	p.cfg.Log.Info("event planned before, publishing its recorded plans again", "event", w.eventID, "plannedAt", stood.PlannedAt)
	return p.asRecorded(ctx, w, stood, plans)
}

// settledAt is when eventID's rollout was marked settled (zero while it
// is not): the applier refuses its plans then, so a redelivered event
// publishes none.
func (p *Planner) settledAt(ctx context.Context, eventID string) (time.Time, error) {
	store, err := rollout.Open(ctx, p.cfg.JetStream)
	if err != nil {
		return time.Time{}, err
	}
	c, _, err := store.Get(ctx, eventID)
	if errors.Is(err, rollout.ErrUnreadable) {
		return time.Time{}, nil // the applier says what it makes of the plans
	}
	return c.Settled, err
}

// asRecorded turns plans, made now, into the plans of the VMs rec lists,
// each in its recorded batch. A listed VM the planner's cache no longer
// shows referencing the object gets a plan the applier decides afresh on
// the VM as the API server has it (Recheck): it may be gone, or moved
// elsewhere by a user. A VM that is not listed is not the rollout's: it
// was created, or came to reference the object, after the event was
// planned.
func (p *Planner) asRecorded(ctx context.Context, w work, rec events.Rollout, plans []events.Plan) ([]events.Plan, error) {
	listed, ok, err := rollout.PlannedVMs(ctx, p.cfg.JetStream, rec)
	if err != nil || !ok {
		// A record from before kvlive listed its VMs: plans as made now.
		return plans, err
	}
	now := make(map[string]events.Plan, len(plans))
	for _, pl := range plans {
		now[pl.VM.UID] = pl
	}
	out := make([]events.Plan, 0, len(listed))
	for _, vm := range listed {
		pl, ok := now[vm.UID]
		if !ok {
			pl = events.Plan{
				EventID: w.eventID, VM: vm.VMRef, Target: w.target.Target, Recheck: true,
				Action: events.ResultSkip, Reason: fmt.Sprintf("not among the VMs referencing %s when the event was planned again", w.target.Object),
			}
		}
		pl.Batch = vm.Batch
		out = append(out, pl)
	}
	return out, nil
}
