package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Tail reads a stream as it grows, for a command that follows a rollout:
// what is stored, then what is published after. A read that a leader
// election breaks resumes after the last message read, so no message is
// read twice or skipped; one that stays broken for the bound js was given
// by Reads (ReadBound otherwise) fails. A Tail is not safe for concurrent
// use; Stop it when done.
type Tail struct {
	js     jetstream.JetStream
	r      retrier
	stream string
	cfg    jetstream.OrderedConsumerConfig

	cons      jetstream.Consumer
	it        jetstream.MessagesContext
	checked   time.Time // when the consumer was last seen alive
	delivered time.Time // when the read last got a message, or began
	last      uint64    // stream sequence of the last message read
	broken    time.Time // when the read broke, if it has not read since
	b         wait.Backoff
}

// tailExpiry is how long one pull request of a Tail lasts.
const tailExpiry = 4 * time.Second

// NewTail reads stream from what cfg selects.
func NewTail(js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig) *Tail {
	// The tail resumes a broken read itself, within its bound.
	cfg.MaxResetAttempts = 1
	return &Tail{js: unwrap(js), r: boundOf(js), stream: stream, cfg: cfg}
}

// Next returns the next message, or nats.ErrTimeout when none comes within
// wait.
func (t *Tail) Next(ctx context.Context, wait time.Duration) (jetstream.Msg, error) {
	for {
		err := t.open(ctx)
		if err == nil {
			var msg jetstream.Msg
			if msg, err = t.it.Next(jetstream.NextMaxWait(wait)); err == nil {
				if md, err := msg.Metadata(); err == nil {
					t.last = md.Sequence.Stream
				}
				t.broken, t.delivered = time.Time{}, time.Now()
				return msg, nil
			}
			if errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
				if err = t.alive(ctx); err == nil {
					return nil, nats.ErrTimeout
				}
			}
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err := t.pause(ctx, err); err != nil {
			return nil, err
		}
	}
}

// open starts the read, after the last message read if there was one.
func (t *Tail) open(ctx context.Context) error {
	if t.it != nil {
		return nil
	}
	cfg := t.cfg
	if t.last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, t.last+1, nil
	}
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = ReadInactive
	}
	ctx, cancel := context.WithTimeout(ctx, min(tryTimeout, t.r.bound))
	defer cancel()
	cons, err := t.js.OrderedConsumer(ctx, t.stream, cfg)
	if err != nil {
		return err
	}
	t.cons, t.checked, t.delivered = cons, time.Now(), time.Now()
	t.it, err = cons.Messages()
	return err
}

// alive tells a quiet stream from a consumer lost with its node, which
// looks the same to a pull: at most every tailExpiry, it asks the server
// for the consumer.
func (t *Tail) alive(ctx context.Context) error {
	if time.Since(t.checked) < tailExpiry {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(tryTimeout, t.r.bound))
	defer cancel()
	info, err := t.cons.Info(ctx)
	if err != nil {
		// Gone, offline with its node, or unanswered: the read starts
		// again on a new consumer, which says if the stream is gone.
		return fmt.Errorf("%w: %w", jetstream.ErrConsumerDeleted, err)
	}
	if info.NumPending > 0 && time.Since(t.delivered) > tailExpiry {
		// Messages wait for this consumer, yet none came: the pull is
		// stuck (a lost request, a consumer moved); start it again.
		return fmt.Errorf("%w: %d messages pending, none delivered for %s", jetstream.ErrNoHeartbeat, info.NumPending, roundSince(t.delivered))
	}
	t.checked = time.Now()
	return nil
}

// pause waits before the read is tried again, or says why it will not be.
func (t *Tail) pause(ctx context.Context, err error) error {
	if !Transient(err) {
		return fmt.Errorf("stream %s: %w", t.stream, err)
	}
	if t.broken.IsZero() {
		t.broken, t.b = time.Now(), backoff()
	}
	pause := t.b.Step()
	if time.Since(t.broken)+pause > t.r.bound {
		return fmt.Errorf("stream %s: read after message %d: %w (broken for %s: a NATS leader election that did not end, or a server that is down)",
			t.stream, t.last, err, roundSince(t.broken))
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pause):
		return nil
	}
}

// Stop ends the read.
func (t *Tail) Stop() {
	if t.it != nil {
		t.it.Stop()
		t.it = nil
	}
}
