package events_test

import (
	"context"
	"fmt"
	"strings"
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

func (a *askedTogether) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := a.stores.wait(ctx, cfg.Name); err != nil {
		return nil, err
	}
	return a.JetStream.CreateStream(ctx, cfg)
}

func (a *askedTogether) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := a.stores.wait(ctx, "kv "+cfg.Bucket); err != nil {
		return nil, err
	}
	return a.JetStream.CreateKeyValue(ctx, cfg)
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

// TestSetupLeavesACurrentBusAlone: a replica starting on a bus another has
// set up sends no stream update (nats-server v2.15.3 reads a stream's
// config unguarded while it adds a consumer, so every start's update raced
// the other replicas' consumers); a stream whose config differs is
// updated, and only it.
func TestSetupLeavesACurrentBusAlone(t *testing.T) {
	js := testenv.BareJetStream(t)
	o := events.DefaultStreamOptions()
	if err := events.Setup(t.Context(), js, o, nil); err != nil {
		t.Fatal(err)
	}
	updated, err := js.Conn().SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Setup(t.Context(), js, o, nil); err != nil {
		t.Fatal(err)
	}
	if err := events.EnsureStream(t.Context(), js, events.NotifyStreamConfig(o)); err != nil {
		t.Fatal(err)
	}
	if err := events.EnsureStream(t.Context(), js, events.NotifyStreamConfig(o)); err != nil {
		t.Fatal(err)
	}
	changed := events.StreamConfigs(o)[0]
	changed.Description = "changed by an upgrade"
	if err := events.EnsureStream(t.Context(), js, changed); err != nil {
		t.Fatal(err)
	}
	// Advisories are sent in the order the updates were made: the changed
	// stream's is the first, or the second setup's came before it.
	m, err := updated.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no update of the changed stream: %v", err)
	}
	if want := "$JS.EVENT.ADVISORY.STREAM.UPDATED." + changed.Name; m.Subject != want {
		t.Errorf("first update %s, want only %s", m.Subject, want)
	}
}

// TestSetupRemakesAnOlderWorkStreamOnlyWhenEmpty: a work stream an older
// kvlive made with limits retention is re-created as a work queue when it
// holds nothing; while it holds a message Setup refuses, saying so, and
// the message stays.
func TestSetupRemakesAnOlderWorkStreamOnlyWhenEmpty(t *testing.T) {
	o := events.DefaultStreamOptions()
	var work jetstream.StreamConfig
	for _, cfg := range events.StreamConfigs(o) {
		if cfg.Retention == jetstream.WorkQueuePolicy && cfg.Name != events.StreamPlans {
			work = cfg
		}
	}
	older := func(t *testing.T, js jetstream.JetStream) {
		cfg := work
		cfg.Retention = jetstream.LimitsPolicy
		if _, err := js.CreateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("empty", func(t *testing.T) {
		js := testenv.BareJetStream(t)
		older(t, js)
		if err := events.Setup(t.Context(), js, o, nil); err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(t.Context(), work.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Retention; got != jetstream.WorkQueuePolicy {
			t.Errorf("%s retention %v, want a work queue", work.Name, got)
		}
	})
	t.Run("holding work", func(t *testing.T) {
		js := testenv.BareJetStream(t)
		older(t, js)
		subject := strings.ReplaceAll(work.Subjects[0], ">", "x")
		if _, err := js.Publish(t.Context(), subject, []byte("pending")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err := events.Setup(ctx, js, o, nil)
		if err == nil || !strings.Contains(err.Error(), "still holds 1 unsettled messages") {
			t.Fatalf("setup over an older stream holding work: %v", err)
		}
		s, err := js.Stream(t.Context(), work.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info, _ := s.Info(t.Context()); info.State.Msgs != 1 || info.Config.Retention != jetstream.LimitsPolicy {
			t.Errorf("%s after a refused setup: %d messages, retention %v", work.Name, info.State.Msgs, info.Config.Retention)
		}
	})
}
