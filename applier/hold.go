package applier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
)

// A paused rollout's plans are parked, untouched, in events.StreamHeld and
// acked on the plans stream, so a pause of any length burns none of their
// deliveries. Whoever sees the rollout leave the pause (the control watch of
// any applier replica, or the applier that parked a plan just as it was
// resumed) sends the parked plans back to the plans stream, each under an
// id derived from its parked sequence, so releasing twice publishes once.

// controlled handles a plan whose rollout is not running. It reports
// whether the plan was held (and needs nothing more); for an aborted
// rollout it returns the outcome of a VM that will not be moved.
func (a *Applier) controlled(ctx context.Context, msg jetstream.Msg, plan events.Plan, attempt int) (held bool, out *events.Outcome) {
	st := a.watch.Of(plan.EventID)
	switch st.State {
	case events.StatePaused:
		a.hold(ctx, msg, plan, attempt)
		return true, nil
	case events.StateAborted:
		if !plan.Action.Moves() && !plan.Recheck {
			return false, nil
		}
		return false, &events.Outcome{Result: events.ResultSkip, Reason: joinReason("rollout aborted before the VM moved", st.Describe())}
	}
	return false, nil
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
// it sends the plan straight back, since the release may have swept the
// held stream before the plan got there.
func (a *Applier) hold(ctx context.Context, msg jetstream.Msg, plan events.Plan, attempt int) {
	md, err := msg.Metadata()
	if err != nil {
		a.cfg.Log.Error("applier: plan without metadata cannot be held", "vm", plan.VM.String(), "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	planID := events.PlanID(plan.EventID, plan.VM.UID)
	parked := nats.NewMsg(events.HeldSubject(plan.VM.Namespace))
	parked.Data = msg.Data()
	copyHeaders(parked.Header, msg.Headers())
	ack, err := a.cfg.JetStream.PublishMsg(ctx, parked, jetstream.WithMsgID(events.HeldID(planID, md.Sequence.Stream)))
	if err != nil {
		if attempt >= events.ApplierMaxDeliver {
			// A nak now would drop the plan for good: keep it as a dead
			// letter, which `kvlive dlq retry` sends back.
			if dlErr := events.DeadLetter(ctx, a.cfg.JetStream, events.ConsumerApplier, msg, "could not hold the plan of a paused rollout: "+err.Error()); dlErr == nil {
				return
			}
		}
		a.cfg.Log.Warn("applier: could not hold plan of paused rollout, will retry", "vm", plan.VM.String(), "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := msg.DoubleAck(ctx); err != nil {
		// Redelivered, it is held again under the same id: stored once.
		a.cfg.Log.Warn("applier: ack of held plan failed", "vm", plan.VM.String(), "err", err)
	}
	a.cfg.Metrics.Held()
	a.cfg.Log.Debug("applier: plan held, rollout paused", "event", plan.EventID, "vm", plan.VM.String())
	// A mark in the event's trace: the gap before this VM's apply span is a pause.
	_, span := a.tracer.Start(ctx, "applier.hold "+plan.VM.String(), trace.WithAttributes(
		attribute.String("kvlive.event.id", plan.EventID), attribute.Int("kvlive.attempt", attempt)))
	span.End()
	if a.watch.Of(plan.EventID).State != events.StatePaused {
		if err := a.releaseOne(ctx, ack.Sequence, plan, parked.Data, parked.Header); err != nil {
			a.cfg.Log.Warn("applier: releasing a just-held plan failed; the next sweep releases it", "vm", plan.VM.String(), "err", err)
		}
	}
}

// release sends back every held plan whose rollout is no longer paused:
// of one event, or of any when eventID is empty (at start, after a crash
// in the middle of a release).
func (a *Applier) release(ctx context.Context, eventID string) error {
	cons, err := a.cfg.JetStream.OrderedConsumer(ctx, events.StreamHeld, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("applier: read %s: %w", events.StreamHeld, err)
	}
	info := cons.CachedInfo()
	if info == nil || info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("applier: read %s: %w", events.StreamHeld, err)
	}
	defer it.Stop()
	released := 0
	for range info.NumPending {
		msg, err := it.Next(jetstream.NextMaxWait(5 * time.Second))
		if errors.Is(err, nats.ErrTimeout) {
			break // the rest was released (deleted) meanwhile
		}
		if err != nil {
			return fmt.Errorf("applier: read %s: %w", events.StreamHeld, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		var plan events.Plan
		if _, err := events.Decode(msg.Data(), events.TypePlan, &plan); err == nil &&
			(eventID == "" || plan.EventID == eventID) && a.watch.Of(plan.EventID).State != events.StatePaused {
			if err := a.releaseOne(ctx, md.Sequence.Stream, plan, msg.Data(), msg.Headers()); err != nil {
				return err
			}
			released++
		}
		if md.NumPending == 0 {
			break
		}
	}
	if released > 0 {
		a.cfg.Metrics.Released(released)
		a.cfg.Log.Info("applier: released held plans", "event", eventID, "plans", released)
	}
	return nil
}

// releaseOne publishes a held plan (data, as decoded into plan) back to the
// plans stream and deletes it from the held stream.
func (a *Applier) releaseOne(ctx context.Context, seq uint64, plan events.Plan, data []byte, header nats.Header) error {
	back := nats.NewMsg(events.PlanSubject(plan.VM.Namespace))
	back.Data = data
	copyHeaders(back.Header, header)
	id := events.ReleasedID(events.PlanID(plan.EventID, plan.VM.UID), seq)
	if _, err := a.cfg.JetStream.PublishMsg(ctx, back, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("applier: release %s: %w", id, err)
	}
	// Another replica may have deleted it first. Left behind, it would be
	// released again under the same id: dropped as a duplicate, or, past
	// the duplicate window, found at its target by the applier.
	if err := a.held.DeleteMsg(ctx, seq); err != nil {
		a.cfg.Log.Debug("applier: held message not deleted", "seq", seq, "err", err)
	}
	return nil
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
