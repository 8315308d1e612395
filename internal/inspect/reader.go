package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Reader reads kvlive's streams and buckets. It creates no stream, bucket or
// durable consumer, so it is safe to point at a running kvlive's server.
type Reader struct {
	js jetstream.JetStream
}

// NewReader returns a Reader over js.
func NewReader(js jetstream.JetStream) *Reader { return &Reader{js: js} }

// pullBatch is how many messages a scan asks the server for at once.
const pullBatch = 1024

// scan calls fn for every message of stream that cfg selects, in stream
// order, and returns once it has read every message stored when the scan
// began: the consumer's pending count at creation bounds the read, so
// messages published meanwhile never keep it going.
func (r *Reader) scan(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig, fn func(jetstream.Msg)) error {
	s, err := r.stream(ctx, stream)
	if err != nil {
		return err
	}
	// A server that goes away mid-read should end the read, not retry forever.
	cfg.MaxResetAttempts = 3
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("inspect: read %s: %w", stream, err)
	}
	info := cons.CachedInfo()
	if info == nil || info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch))
	if err != nil {
		return fmt.Errorf("inspect: read %s: %w", stream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for read := uint64(0); read < info.NumPending; read++ {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("inspect: read %s: %w", stream, err)
		}
		fn(msg)
		// Messages that expired since the scan began are never delivered;
		// the server's own count of what is left catches that.
		if md, err := msg.Metadata(); err == nil && md.NumPending == 0 {
			break
		}
	}
	return nil
}

// stream looks a stream up, turning "not found" into a hint about where the
// user is looking.
func (r *Reader) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := r.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("inspect: stream %s not found: nothing was recorded on this NATS server (is it the one kvlive run or demo used?)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: stream %s: %w", name, err)
	}
	return s, nil
}
