package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/consumer"
)

// A paused rollout's plans are parked, untouched, by the applier in
// events.StreamHeld (a work queue, under the event's subject) and acked on
// the plans stream, so a pause of any length uses none of their
// deliveries. The controller releases an event's held plans once its
// rollout leaves the pause: its control watch sees the change, and a sweep
// every heldSweepEvery finds held plans of a rollout not paused (one parked
// just as it was resumed, or one resumed while no controller ran). A
// release is a durable consumer on the event's held plans, shared by every
// replica, which sends each back to the plans stream under an id derived
// from its held sequence (so releasing twice publishes once), until none is
// left. Staged batches are released the same way (gate.go).

// releasePoll is how often a release checks whether the event's held plans
// are all sent back.
const releasePoll = 200 * time.Millisecond

// heldSweepEvery is how often the controller looks for held plans of
// rollouts that are not paused.
const heldSweepEvery = 2 * time.Second

// release sends back every held plan of eventID, or, when eventID is
// empty, of every event whose rollout is not paused (at start: a rollout
// resumed while no applier ran). It returns once none is left, or the
// rollout is paused again.
func (rc *Controller) release(ctx context.Context, eventID string) error {
	if eventID != "" {
		return rc.releaseEvent(ctx, eventID)
	}
	held, err := rc.heldEvents(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range held {
		if rc.watch.Of(id).State != events.StatePaused {
			errs = append(errs, rc.releaseEvent(ctx, id))
		}
	}
	return errors.Join(errs...)
}

// heldEvents lists the events with held plans, from the held stream's
// subjects.
func (rc *Controller) heldEvents(ctx context.Context) ([]string, error) {
	info, err := rc.held.Info(ctx, jetstream.WithSubjectFilter(events.HeldOf("")))
	if err != nil {
		return nil, fmt.Errorf("rollout: read %s: %w", events.StreamHeld, err)
	}
	seen := map[string]bool{}
	var ids []string
	for subject := range info.State.Subjects {
		id, err := events.EventOfSubject(subject)
		if err != nil {
			rc.cfg.Log.Warn("rollout: held plans under a subject that names no event", "subject", subject, "err", err)
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
func (rc *Controller) releaseEvent(ctx context.Context, eventID string) error {
	n, err := rc.drain(ctx, events.StreamHeld, events.ReleaseConsumer(eventID), events.ReleasedID,
		func() bool { return rc.watch.Of(eventID).State == events.StatePaused }, "event", eventID)
	if n > 0 {
		rc.cfg.Metrics.Released(n)
		rc.cfg.Log.Info("rollout: released held plans", "event", eventID, "plans", n)
	}
	if err != nil {
		return fmt.Errorf("rollout: release %s: %w", eventID, err)
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
func (rc *Controller) drain(ctx context.Context, stream string, cfg jetstream.ConsumerConfig, idOf func(string, uint64) string,
	halt func() bool, logArgs ...any) (int, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, drainLimit,
		fmt.Errorf("%s still had plans for consumer %s after %s", stream, cfg.Durable, drainLimit))
	defer cancel()
	total := 0
	for {
		n, gone, err := rc.drainOnce(ctx, stream, cfg, idOf, halt, logArgs...)
		total += n
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			rc.cfg.Metrics.DrainFailed(stream)
			rc.cfg.Log.Warn("rollout: release of plans did not finish; it is tried again", append(logArgs, "stream", stream, "sent", total, "err", err)...)
			return total, err
		}
		if !gone {
			return total, nil
		}
		left, err := CountSubjects(ctx, rc.cfg.JetStream, stream, cfg.FilterSubject)
		if err != nil {
			return total, err
		}
		if left == 0 || (halt != nil && halt()) {
			return total, nil
		}
		rc.cfg.Log.Debug("rollout: drained consumer deleted by another replica with plans left; draining again", append(logArgs, "left", left)...)
	}
}

// drainOnce is one run of drain's consumer; gone reports that it was
// deleted under the run.
func (rc *Controller) drainOnce(ctx context.Context, stream string, cfg jetstream.ConsumerConfig, idOf func(string, uint64) string,
	halt func() bool, logArgs ...any) (sentN int, gone bool, err error) {
	cons, err := rc.cfg.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return 0, false, err
	}
	rt, err := consumer.New(consumer.Config{
		Stage: "releaser", Consumer: cons, JetStream: rc.cfg.JetStream, Workers: 4, MaxDeliver: events.ReleaseMaxDeliver,
		Backoff: consumer.DefaultBackoff(), Grace: rc.cfg.Grace, Log: rc.cfg.Log.With(logArgs...), Metrics: rc.cfg.Metrics,
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
		f := rc.releaseOne(ctx, msg, d, idOf)
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
	if err := rc.cfg.JetStream.DeleteConsumer(context.WithoutCancel(ctx), stream, cfg.Durable); err != nil &&
		!errors.Is(err, jetstream.ErrConsumerNotFound) {
		rc.cfg.Log.Debug("rollout: drained consumer not deleted", "consumer", cfg.Durable, "err", err)
	}
	return int(sent.Load()), false, nil
}

// releaseOne publishes a held (or staged) plan back to the plans stream,
// under the message id idOf gives it; the held (or staged) stream drops it
// once the runtime acks it.
func (rc *Controller) releaseOne(ctx context.Context, msg jetstream.Msg, d consumer.Delivery, idOf func(planID string, seq uint64) string) consumer.Fate {
	var plan events.Plan
	if _, err := events.Decode(msg.Data(), events.TypePlan, &plan); err != nil {
		return consumer.Poison("held plan: " + err.Error())
	}
	back := nats.NewMsg(events.PlanSubject(plan.VM.Namespace, plan.EventID))
	back.Data = msg.Data()
	events.CopyHeaders(back.Header, msg.Headers())
	id := idOf(events.PlanID(plan.EventID, plan.VM.UID), d.Sequence)
	if _, err := rc.cfg.JetStream.PublishMsg(ctx, back, jetstream.WithMsgID(id)); err != nil {
		return consumer.Retry(fmt.Errorf("release %s: %w", id, err))
	}
	return consumer.Done()
}

// releaseLater queues eventID's held plans for release, without waiting
// for the releaser.
func (rc *Controller) releaseLater(ctx context.Context, eventID string) {
	select {
	case rc.leftPause <- eventID:
	default:
		go func() {
			select {
			case rc.leftPause <- eventID:
			case <-ctx.Done():
			}
		}()
	}
}

// releaser releases the held plans of each event that left a pause, one
// event at a time, retrying a failed release with a growing delay: a
// resumed rollout's plans must not stay parked because NATS hiccuped.
func (rc *Controller) releaser(ctx context.Context) {
	backoff := consumer.DefaultBackoff()
	for {
		var eventID string
		select {
		case eventID = <-rc.leftPause:
		case <-ctx.Done():
			return
		}
		for attempt := 1; ; attempt++ {
			err := rc.release(ctx, eventID)
			if err == nil || ctx.Err() != nil {
				break
			}
			rc.cfg.Log.Warn("rollout: releasing held plans failed, retrying", "event", eventID, "attempt", attempt, "err", err)
			select {
			case <-time.After(backoff.Delay(attempt)):
			case <-ctx.Done():
				return
			}
		}
	}
}
