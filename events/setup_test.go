package events_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// TestSetupAsksForEverythingAtOnce: a JetStream cluster that has just
// formed can leave each create unanswered for a whole attempt (CI saw
// three replicas spend 58 s on eleven of them, one after another). Setup
// asks for every stream and bucket before it waits on any answer, and then
// for every consumer, so a slow cluster costs it one attempt a stage, not
// one per object: here, on a fresh bus, no create of a stage is answered
// until all of that stage's have been made.
func TestSetupAsksForEverythingAtOnce(t *testing.T) {
	o := events.DefaultStreamOptions()
	js := &askedTogether{
		JetStream: testenv.BareJetStream(t),
		stores:    newBarrier(len(events.StreamConfigs(o)) + len(events.KVConfigs(o))),
		consumers: newBarrier(3), // the planner's, the applier's, the verifier's
	}
	// Well inside SetupTimeout: Setup, one request at a time, retries the
	// first of a stage until this ends.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := events.Setup(ctx, js, o, nil); err != nil {
		t.Fatalf("setup: %v; asked for %v of the streams and buckets, %v of the consumers", err, js.stores, js.consumers)
	}
}

// askedTogether answers no stream or bucket create until every one has been
// asked for, and no consumer create until every consumer has been, each
// request otherwise left unanswered until its context ends.
type askedTogether struct {
	jetstream.JetStream
	stores, consumers *barrier
}

func (a *askedTogether) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := a.stores.wait(ctx, cfg.Name); err != nil {
		return nil, err
	}
	return a.JetStream.CreateOrUpdateStream(ctx, cfg)
}

func (a *askedTogether) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := a.stores.wait(ctx, "kv "+cfg.Bucket); err != nil {
		return nil, err
	}
	return a.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
}

func (a *askedTogether) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if err := a.consumers.wait(ctx, stream+"/"+cfg.Durable); err != nil {
		return nil, err
	}
	return a.JetStream.CreateConsumer(ctx, stream, cfg)
}

// barrier lets requests through once want distinct names have arrived.
type barrier struct {
	want  int
	mu    sync.Mutex
	asked map[string]bool
	all   chan struct{}
}

func newBarrier(want int) *barrier {
	return &barrier{want: want, asked: map[string]bool{}, all: make(chan struct{})}
}

func (b *barrier) wait(ctx context.Context, name string) error {
	b.mu.Lock()
	if !b.asked[name] {
		b.asked[name] = true
		if len(b.asked) == b.want {
			close(b.all)
		}
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *barrier) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("%d of %d", len(b.asked), b.want)
}
