package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Settle turns the fate f of msg, delivered as d, into an ack, a nak or a
// dead letter. It is the only place the runtime settles a message, and it
// never fails: whatever goes wrong is logged and counted, and the message is
// left for the server to redeliver rather than lost.
//
//   - Done acks. A failed ack is logged, not retried: the server redelivers
//     and the handler must be idempotent anyway.
//   - Retry naks with Backoff.Delay(d.Attempt), or, when d.Last or d.Attempt
//     reached MaxDeliver, dead-letters with "gave up after N deliveries: err".
//   - Poison dead-letters with its reason, whatever the delivery.
//   - A dead letter that cannot be stored is never followed by a term: the
//     message is nak'ed with backoff, to be dead-lettered again later.
//
// ctx bounds the dead-letter publish; pass one that is not cancelled by a
// shutdown, or settling during a shutdown fails.
func (r *Runtime) Settle(ctx context.Context, msg jetstream.Msg, d Delivery, f Fate) {
	switch f.kind {
	case kindDone:
		r.ack(msg, d)
	case kindPoison:
		r.deadLetter(ctx, msg, d, f.reason)
	case kindInterrupted:
		r.log.Info("handler interrupted by shutdown; handing the message back", attrs(msg, d, "err", f.err)...)
		r.nak(msg, d, r.cfg.Backoff.Min)
	default:
		err := f.Err()
		if d.Last || d.Attempt >= r.cfg.MaxDeliver {
			r.deadLetter(ctx, msg, d, fmt.Sprintf("gave up after %d deliveries: %v", d.Attempt, err))
			return
		}
		delay := r.cfg.Backoff.delay(d.Attempt, r.rand())
		r.log.Warn("will retry", attrs(msg, d, "err", err, "delay", delay)...)
		r.nak(msg, d, delay)
	}
}

func (r *Runtime) ack(msg jetstream.Msg, d Delivery) {
	if err := msg.Ack(); err != nil {
		r.log.Warn("ack failed; the server will redeliver the message", attrs(msg, d, "err", err)...)
		r.cfg.Metrics.Settled(r.cfg.Stage, OutcomeFailed)
		return
	}
	r.cfg.Metrics.Settled(r.cfg.Stage, OutcomeAck)
}

// nak hands msg back to the server; a zero delay asks for an immediate
// redelivery, to another replica if one is fetching.
func (r *Runtime) nak(msg jetstream.Msg, d Delivery, delay time.Duration) {
	var err error
	if delay > 0 {
		err = msg.NakWithDelay(delay)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		r.log.Warn("nak failed; the server will redeliver the message after AckWait", attrs(msg, d, "err", err)...)
		r.cfg.Metrics.Settled(r.cfg.Stage, OutcomeFailed)
		return
	}
	r.cfg.Metrics.Settled(r.cfg.Stage, OutcomeNak)
}

// deadLetter stores a copy of msg in the dead-letter stream and only then
// terminates it, so that a message is never gone from both streams.
func (r *Runtime) deadLetter(ctx context.Context, msg jetstream.Msg, d Delivery, reason string) {
	reason = clipReason(reason)
	if err := DeadLetter(ctx, r.cfg.JetStream, r.cfg.Stage, msg, reason); err != nil {
		r.log.Error("dead letter not stored; naking the message to dead-letter it again later",
			attrs(msg, d, "reason", reason, "err", err)...)
		r.cfg.Metrics.DeadLetterFailed(r.cfg.Stage)
		r.nak(msg, d, r.cfg.Backoff.delay(d.Attempt, r.rand()))
		return
	}
	r.log.Error("message dead-lettered", attrs(msg, d, "reason", reason)...)
	if err := msg.TermWithReason(reason); err != nil {
		// The redelivery stores the same dead letter again, and JetStream
		// drops it as a duplicate of its Msg-Id, before this term is retried.
		r.log.Warn("terminating a dead-lettered message failed; it will be redelivered", attrs(msg, d, "err", err)...)
		r.cfg.Metrics.Settled(r.cfg.Stage, OutcomeFailed)
		return
	}
	r.cfg.Metrics.Settled(r.cfg.Stage, OutcomeDeadLetter)
}
