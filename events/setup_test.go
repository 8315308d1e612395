package events_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// TestSetupAsksForEveryStreamAndBucketAtOnce: a JetStream cluster that has
// just formed can leave each create unanswered for a whole attempt (CI saw
// three replicas spend 58 s on eleven of them, one after another). Setup
// asks for every stream and bucket before it waits on any answer, so a slow
// cluster costs it one attempt, not one per stream: here no create is
// answered until all have been asked for.
func TestSetupAsksForEveryStreamAndBucketAtOnce(t *testing.T) {
	o := events.DefaultStreamOptions()
	js := &askedTogether{
		JetStream: testenv.BareJetStream(t),
		want:      len(events.StreamConfigs(o)) + len(events.KVConfigs(o)),
		asked:     map[string]bool{},
		all:       make(chan struct{}),
	}
	// Well inside SetupTimeout: Setup, one create at a time, retries the
	// first stream until this ends.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := events.Setup(ctx, js, o, nil); err != nil {
		js.mu.Lock()
		defer js.mu.Unlock()
		t.Fatalf("setup: %v; asked for %d of %d streams and buckets: %v", err, len(js.asked), js.want, js.asked)
	}
}

// askedTogether answers no stream or bucket create until every one has been
// asked for (or the request's context ends, as an unanswered request's does).
type askedTogether struct {
	jetstream.JetStream
	want  int
	mu    sync.Mutex
	asked map[string]bool
	all   chan struct{}
}

func (a *askedTogether) wait(ctx context.Context, name string) error {
	a.mu.Lock()
	if !a.asked[name] {
		a.asked[name] = true
		if len(a.asked) == a.want {
			close(a.all)
		}
	}
	a.mu.Unlock()
	select {
	case <-a.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *askedTogether) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := a.wait(ctx, cfg.Name); err != nil {
		return nil, err
	}
	return a.JetStream.CreateOrUpdateStream(ctx, cfg)
}

func (a *askedTogether) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := a.wait(ctx, "kv "+cfg.Bucket); err != nil {
		return nil, err
	}
	return a.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
}
