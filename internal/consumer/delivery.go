package consumer

import (
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Delivery tells a handler which delivery of a message this is.
type Delivery struct {
	// Attempt is the message's delivery count, from 1.
	Attempt int
	// Last is true when Attempt has reached Config.MaxDeliver: a Retry now
	// dead-letters the message.
	Last bool
	// Stream and Sequence locate the message in its stream; they are empty
	// for a message without JetStream metadata.
	Stream   string
	Sequence uint64
	// Stored is when the stream stored the message (zero without metadata).
	Stored time.Time
}

// Delivery reads msg's delivery from its JetStream metadata. A message
// without metadata (not from JetStream) counts as a first delivery, which is
// logged because it can never use up its budget.
func (r *Runtime) Delivery(msg jetstream.Msg) Delivery {
	md, err := msg.Metadata()
	if err != nil || md == nil {
		r.log.Warn("message has no JetStream metadata; treating it as a first delivery", "subject", msg.Subject(), "err", err)
		return Delivery{Attempt: 1, Last: r.cfg.MaxDeliver <= 1}
	}
	attempt := int(min(max(md.NumDelivered, 1), math.MaxInt32))
	return Delivery{
		Attempt:  attempt,
		Last:     attempt >= r.cfg.MaxDeliver,
		Stream:   md.Stream,
		Sequence: md.Sequence.Stream,
		Stored:   md.Timestamp,
	}
}

// attrs are the log attributes that identify msg.
func attrs(msg jetstream.Msg, d Delivery, more ...any) []any {
	return append([]any{"subject", msg.Subject(), "stream", d.Stream, "seq", d.Sequence, "attempt", d.Attempt}, more...)
}
