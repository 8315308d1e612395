package applier

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
	"kvlive/internal/consumer"
	"kvlive/rollout"
)

// A paused rollout's plans are parked, untouched, in events.StreamHeld (a
// work queue, under the event's subject) and acked on the plans stream, so
// a pause of any length uses none of their deliveries. Whoever sees the
// rollout leave the pause (the control watch of any applier replica, or the
// applier that parked a plan just as it was resumed) releases the event:
// a durable consumer on the event's held plans, shared by every replica,
// sends each back to the plans stream under an id derived from its held
// sequence (so releasing twice publishes once), until none is left.

// releasePoll is how often a release checks whether the event's held plans
// are all sent back.
const releasePoll = 200 * time.Millisecond

// controlled handles a plan whose rollout is not running. A non-nil held
// is the fate of a plan it parked; for an aborted rollout it returns the
// outcome of a VM that will not be moved.
func (a *Applier) controlled(ctx context.Context, msg jetstream.Msg, plan events.Plan, d consumer.Delivery) (held *consumer.Fate, out *events.Outcome) {
	st := a.watch.Of(plan.EventID)
	switch st.State {
	case events.StatePaused:
		f := a.hold(ctx, msg, plan, d)
		return &f, nil
	case events.StateAborted:
		if !plan.Action.Moves() && !plan.Recheck {
			return nil, nil
		}
		return nil, &events.Outcome{Result: events.ResultSkip, Reason: joinReason("rollout aborted before the VM moved", st.Describe())}
	}
	return nil, nil
}

// errSteered stops a move whose rollout was paused or aborted while it
// waited for its turn under --rate. It is transient: should the rollout be
// running again by the time handle looks, the plan is simply retried.
var errSteered = fmt.Errorf("%w: rollout paused or aborted while the VM waited its turn", errTransient)

// takeTurn waits for the rate limiter, then makes sure the rollout was not
// paused or aborted meanwhile, so a pause stops moves already queued.
func (a *Applier) takeTurn(ctx context.Context, plan events.Plan) error {
	if err := a.limiter.Wait(ctx); err != nil {
		return err
	}
	if a.watch != nil && a.watch.Of(plan.EventID).State != events.StateRunning {
		return errSteered
	}
	return nil
}

// hold parks the plan. Should the rollout leave the pause while it does,
// the event is released again, since a release may have emptied the held
// stream before the plan got there.
func (a *Applier) hold(ctx context.Context, msg jetstream.Msg, plan events.Plan, d consumer.Delivery) consumer.Fate {
	planID := events.PlanID(plan.EventID, plan.VM.UID)
	parked := nats.NewMsg(events.HeldSubject(plan.VM.Namespace, plan.EventID))
	parked.Data = msg.Data()
	copyHeaders(parked.Header, msg.Headers())
	if _, err := a.cfg.JetStream.PublishMsg(ctx, parked, jetstream.WithMsgID(events.HeldID(planID, d.Sequence))); err != nil {
		return consumer.Retry(fmt.Errorf("could not hold the plan of paused rollout %s for %s: %w", plan.EventID, plan.VM.String(), err))
	}
	a.cfg.Metrics.Held()
	a.cfg.Log.Debug("applier: plan held, rollout paused", "event", plan.EventID, "vm", plan.VM.String())
	// A mark in the event's trace: the gap before this VM's apply span is a pause.
	_, span := a.tracer.Start(ctx, "applier.hold "+plan.VM.String(), trace.WithAttributes(
		attribute.String("kvlive.event.id", plan.EventID), attribute.Int("kvlive.attempt", d.Attempt)))
	span.End()
	if a.watch.Of(plan.EventID).State != events.StatePaused {
		a.releaseLater(ctx, plan.EventID)
	}
	return consumer.Done()
}

// release sends back every held plan of eventID, or, when eventID is
// empty, of every event whose rollout is not paused (at start: a rollout
// resumed while no applier ran). It returns once none is left, or the
// rollout is paused again.
func (a *Applier) release(ctx context.Context, eventID string) error {
	if eventID != "" {
		return a.releaseEvent(ctx, eventID)
	}
	held, err := a.heldEvents(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range held {
		if a.watch.Of(id).State != events.StatePaused {
			errs = append(errs, a.releaseEvent(ctx, id))
		}
	}
	return errors.Join(errs...)
}

// heldEvents lists the events with held plans, from the held stream's
// subjects.
func (a *Applier) heldEvents(ctx context.Context) ([]string, error) {
	info, err := a.held.Info(ctx, jetstream.WithSubjectFilter(events.HeldOf("")))
	if err != nil {
		return nil, fmt.Errorf("applier: read %s: %w", events.StreamHeld, err)
	}
	seen := map[string]bool{}
	var ids []string
	for subject := range info.State.Subjects {
		id, err := events.EventOfSubject(subject)
		if err != nil {
			a.cfg.Log.Warn("applier: held plans under a subject that names no event", "subject", subject, "err", err)
			continue
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// releaseEvent sends the event's held plans back until none is left, or
// its rollout is paused again.
func (a *Applier) releaseEvent(ctx context.Context, eventID string) error {
	n, err := a.drain(ctx, events.StreamHeld, events.ReleaseConsumer(eventID), events.ReleasedID,
		func() bool { return a.watch.Of(eventID).State == events.StatePaused }, "event", eventID)
	if n > 0 {
		a.cfg.Metrics.Released(n)
		a.cfg.Log.Info("applier: released held plans", "event", eventID, "plans", n)
	}
	if err != nil {
		return fmt.Errorf("applier: release %s: %w", eventID, err)
	}
	return nil
}

// drainLimit bounds one drain: a drain that has not emptied its consumer
// by then returns an error saying so, and its caller (the releaser, the
// gate loop) tries again later.
const drainLimit = 10 * time.Minute

// drain runs a durable consumer on stream that every replica shares,
// sending each plan it delivers back to the plans stream under the id idOf
// gives it, until nothing is pending or in flight, or halt says to stop.
// It returns how many plans this call sent. Once done it deletes the
// consumer: the server would drop the idle consumer anyway. A drain whose
// consumer another replica deleted (done with it, or halted) is done when
// nothing is left under the consumer's filter, and starts over on a fresh
// consumer otherwise. Nothing here waits longer than drainLimit.
func (a *Applier) drain(ctx context.Context, stream string, cfg jetstream.ConsumerConfig, idOf func(string, uint64) string,
	halt func() bool, logArgs ...any) (int, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, drainLimit,
		fmt.Errorf("%s still had plans for consumer %s after %s", stream, cfg.Durable, drainLimit))
	defer cancel()
	total := 0
	for {
		n, gone, err := a.drainOnce(ctx, stream, cfg, idOf, halt, logArgs...)
		total += n
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			a.cfg.Metrics.DrainFailed(stream)
			a.cfg.Log.Warn("applier: release of plans did not finish; it is tried again", append(logArgs, "stream", stream, "sent", total, "err", err)...)
			return total, err
		}
		if !gone {
			return total, nil
		}
		left, err := rollout.CountSubjects(ctx, a.cfg.JetStream, stream, cfg.FilterSubject)
		if err != nil {
			return total, err
		}
		if left == 0 || (halt != nil && halt()) {
			return total, nil
		}
		a.cfg.Log.Debug("applier: drained consumer deleted by another replica with plans left; draining again", append(logArgs, "left", left)...)
	}
}

// drainOnce is one run of drain's consumer; gone reports that it was
// deleted under the run.
func (a *Applier) drainOnce(ctx context.Context, stream string, cfg jetstream.ConsumerConfig, idOf func(string, uint64) string,
	halt func() bool, logArgs ...any) (sentN int, gone bool, err error) {
	cons, err := a.cfg.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return 0, false, err
	}
	rt, err := consumer.New(consumer.Config{
		Stage: "releaser", Consumer: cons, JetStream: a.cfg.JetStream, Workers: 4, MaxDeliver: events.ReleaseMaxDeliver,
		Backoff: consumer.DefaultBackoff(), Grace: a.cfg.Grace, Log: a.cfg.Log.With(logArgs...), Metrics: a.cfg.Metrics,
	})
	if err != nil {
		return 0, false, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var deleted atomic.Bool
	go func() {
		tick := time.NewTicker(releasePoll)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			if halt != nil && halt() {
				stop()
				return
			}
			info, err := cons.Info(rctx)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				deleted.Store(true)
				stop()
				return
			}
			if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
				stop()
				return
			}
		}
	}()
	var sent atomic.Int64
	err = rt.Run(rctx, func(ctx context.Context, msg jetstream.Msg, d consumer.Delivery) consumer.Fate {
		f := a.releaseOne(ctx, msg, d, idOf)
		if f.IsDone() {
			sent.Add(1)
		}
		return f
	})
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		deleted.Store(true)
		err = nil
	}
	switch {
	case deleted.Load() && ctx.Err() == nil:
		return int(sent.Load()), true, nil
	case err != nil:
		return int(sent.Load()), false, err
	case ctx.Err() != nil:
		return int(sent.Load()), false, ctx.Err()
	}
	if err := a.cfg.JetStream.DeleteConsumer(context.WithoutCancel(ctx), stream, cfg.Durable); err != nil &&
		!errors.Is(err, jetstream.ErrConsumerNotFound) {
		a.cfg.Log.Debug("applier: drained consumer not deleted", "consumer", cfg.Durable, "err", err)
	}
	return int(sent.Load()), false, nil
}

// releaseOne publishes a held (or staged) plan back to the plans stream,
// under the message id idOf gives it; the held (or staged) stream drops it
// once the runtime acks it.
func (a *Applier) releaseOne(ctx context.Context, msg jetstream.Msg, d consumer.Delivery, idOf func(planID string, seq uint64) string) consumer.Fate {
	var plan events.Plan
	if _, err := events.Decode(msg.Data(), events.TypePlan, &plan); err != nil {
		return consumer.Poison("held plan: " + err.Error())
	}
	back := nats.NewMsg(events.PlanSubject(plan.VM.Namespace, plan.EventID))
	back.Data = msg.Data()
	copyHeaders(back.Header, msg.Headers())
	id := idOf(events.PlanID(plan.EventID, plan.VM.UID), d.Sequence)
	if _, err := a.cfg.JetStream.PublishMsg(ctx, back, jetstream.WithMsgID(id)); err != nil {
		return consumer.Retry(fmt.Errorf("release %s: %w", id, err))
	}
	return consumer.Done()
}

// copyHeaders copies every header but the message id, which each copy sets.
func copyHeaders(dst, src nats.Header) {
	for k, vs := range src {
		if k == jetstream.MsgIDHeader {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}
