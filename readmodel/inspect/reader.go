package inspect

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/internal/bus"
)

// Reader reads kvlive's streams and buckets. It creates no stream, bucket or
// durable consumer, so it is safe to point at a running kvlive's server.
type Reader struct {
	js jetstream.JetStream
}

// NewReader returns a Reader over js.
func NewReader(js jetstream.JetStream) *Reader { return &Reader{js: js} }

// scan calls fn for every message of stream that cfg selects and that was
// stored when the scan began, in stream order (bus.Scan: a read broken by
// a NATS leader election resumes where it stopped).
func (r *Reader) scan(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig, fn func(jetstream.Msg)) error {
	if _, err := r.stream(ctx, stream); err != nil {
		return err
	}
	if err := bus.Scan(ctx, r.js, stream, cfg, fn); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("inspect: %w", err)
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

// EventPath is an event id as a URL path, each segment escaped and its
// slashes kept (switch/0b5c9e1d): how the dashboard, and the links the
// notifications carry, name a rollout's page (/rollouts/<path>).
func EventPath(id string) string {
	parts := strings.Split(id, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}
