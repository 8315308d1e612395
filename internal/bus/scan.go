package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// scanBatch is how many messages a scan asks the server for at once.
const scanBatch = 1024

// scanWait is how long a scan waits for a message its consumer said is
// there before it takes the read for broken and resumes it.
const scanWait = 5 * time.Second

// ReadInactive is how long the server keeps a read's ordered consumer once
// nothing pulls from it. nats.go's default is five minutes, and the server
// allows 1,000 consumers a stream by default: reads made every second (a
// batched rollout's gate, on every replica) would fill a stream with idle
// ones and make the next consumer, anyone's, fail.
const ReadInactive = 10 * time.Second

// Scan calls each for every message of stream that cfg selects and that
// was stored when the scan began, in stream order: the ordered consumer's
// count of pending messages at the start bounds the read, so messages
// published meanwhile never keep it going, and messages that expire
// meanwhile never stall it.
//
// A read that a leader election breaks midway (the consumer lost with its
// node, no responders, a missed heartbeat) resumes after the last message
// read, so each sees every message once; a scan that makes no progress
// for the bound js was given by Reads (ReadBound otherwise) fails, naming
// the stream and how far it got.
func Scan(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig, each func(jetstream.Msg)) error {
	s := &scan{js: unwrap(js), stream: stream, cfg: cfg, each: each}
	return boundOf(js).run(ctx, "stream "+stream+": read", s.pass)
}

// scan is one Scan's progress across its passes.
type scan struct {
	js     jetstream.JetStream
	stream string
	cfg    jetstream.OrderedConsumerConfig
	each   func(jetstream.Msg)

	started bool
	left    uint64 // messages still to read, as counted at the start
	read    uint64
	last    uint64 // stream sequence of the last message read
}

// pass reads on from where the last pass stopped, until the scan is done
// or the read breaks.
func (s *scan) pass(ctx context.Context) (progressed bool, err error) {
	cfg := s.cfg
	if s.read > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, s.last+1, nil
	}
	// The scan resumes a broken read itself, within its bound; the
	// consumer's own endless resets would hide the break.
	cfg.MaxResetAttempts = 1
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = ReadInactive
	}
	cons, err := s.js.OrderedConsumer(ctx, s.stream, cfg)
	if err != nil {
		return false, s.fail(err)
	}
	info := cons.CachedInfo()
	if info == nil {
		return false, fmt.Errorf("stream %s: the ordered consumer has no info", s.stream)
	}
	if !s.started {
		s.started, s.left = true, info.NumPending
	}
	if s.left == 0 || info.NumPending == 0 {
		return false, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(scanBatch))
	if err != nil {
		return false, s.fail(err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for s.left > 0 {
		msg, err := it.Next(jetstream.NextMaxWait(scanWait))
		if err != nil {
			if ctx.Err() != nil {
				return progressed, ctx.Err()
			}
			return progressed, s.fail(err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return progressed, fmt.Errorf("stream %s: %w", s.stream, err)
		}
		s.each(msg)
		s.read, s.left, s.last, progressed = s.read+1, s.left-1, md.Sequence.Stream, true
		// Messages that expired since the scan began are never
		// delivered; the server's own count of what is left says so.
		if md.NumPending == 0 {
			s.left = 0
		}
	}
	return progressed, nil
}

func (s *scan) fail(err error) error {
	if !s.started {
		return err
	}
	return fmt.Errorf("read %d messages, %d to go: %w", s.read, s.left, err)
}

// unwrap is js without Reads, for a read that retries on its own.
func unwrap(js jetstream.JetStream) jetstream.JetStream {
	if r, ok := js.(readingJS); ok {
		return r.JetStream
	}
	return js
}
