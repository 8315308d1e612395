package applier

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clocktesting "k8s.io/utils/clock/testing"

	"kvlive/events"
	"kvlive/rollout"
)

// TestPlansOfABusyRolloutShareAReadOfItsControlRecord: the plans of one
// rollout read its control record once per openFor between them, not once
// each; a read that finds the rollout settled answers for no later plan,
// and one after openFor sees the keeper's mark.
func TestPlansOfABusyRolloutShareAReadOfItsControlRecord(t *testing.T) {
	a, _, plan := fixture(t)
	ctx := context.Background()
	clock := clocktesting.NewFakePassiveClock(time.Now())
	a.cfg.Clock = clock
	store, err := rollout.Open(ctx, a.cfg.JetStream)
	if err != nil {
		t.Fatal(err)
	}
	a.control = store
	// Reads are counted as the server sees them: every request on the
	// bucket's get subjects, queued in synchronous subscriptions (the
	// server delivers them before it answers the flush's ping).
	var subs []*nats.Subscription
	for _, subject := range []string{
		"$JS.API.DIRECT.GET.KV_" + events.BucketControl + ".>",
		"$JS.API.STREAM.MSG.GET.KV_" + events.BucketControl,
	} {
		sub, err := a.cfg.JetStream.Conn().SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		subs = append(subs, sub)
	}
	counted := func() int {
		t.Helper()
		if err := a.cfg.JetStream.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sub := range subs {
			queued, _, err := sub.Pending()
			if err != nil {
				t.Fatal(err)
			}
			n += queued
		}
		return n
	}

	for range 100 {
		if err := a.checkOpen(ctx, plan.EventID); err != nil {
			t.Fatal(err)
		}
	}
	if n := counted(); n != 1 {
		t.Fatalf("100 plans of an open rollout within %v read its control record %d times, want once", openFor, n)
	}

	seen, _, err := store.Get(ctx, plan.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.MarkSettled(ctx, plan.EventID, seen, clock.Now()); err != nil || !ok {
		t.Fatalf("mark settled: %v %v", ok, err)
	}
	clock.SetTime(clock.Now().Add(openFor))
	before := counted()
	for i := range 3 {
		if err := a.checkOpen(ctx, plan.EventID); !errors.Is(err, errNotPlanned) {
			t.Fatalf("plan %d after the mark, %v after the last read: %v, want refused as not planned", i+1, openFor, err)
		}
	}
	if n := counted() - before; n != 6 {
		t.Fatalf("3 plans of a settled rollout read its control record %d times, want 6 (a settled read answers for no later plan, and is read again at the leader)", n)
	}

	if err := store.Reopen(ctx, plan.EventID, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := a.checkOpen(ctx, plan.EventID); err != nil {
		t.Fatalf("a plan of the reopened rollout: %v", err)
	}
}

// staleControl is a JetStream whose control bucket's reads are answered by
// a replica behind the leader, which still holds stale.
type staleControl struct {
	jetstream.JetStream
	stale jetstream.KeyValueEntry
}

func (s staleControl) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := s.JetStream.KeyValue(ctx, bucket)
	if bucket != events.BucketControl {
		return kv, err
	}
	return staleKV{KeyValue: kv, stale: s.stale}, err
}

type staleKV struct {
	jetstream.KeyValue
	stale jetstream.KeyValueEntry
}

func (kv staleKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) { return kv.stale, nil }

// TestAReopenedRolloutsPlanIsNotRefusedOnAReplicasWord: `kvlive dlq retry`
// reopens a settled rollout and sends its plan again; a read of the
// control record answered by a replica behind the leader still shows the
// settled mark, and the retried plan was refused as no plan of kvlive's
// (dead-lettered again). The mark is refused on only as the leader holds
// it.
func TestAReopenedRolloutsPlanIsNotRefusedOnAReplicasWord(t *testing.T) {
	a, _, plan := fixture(t)
	ctx := context.Background()
	store, err := rollout.Open(ctx, a.cfg.JetStream)
	if err != nil {
		t.Fatal(err)
	}
	seen, _, err := store.Get(ctx, plan.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.MarkSettled(ctx, plan.EventID, seen, time.Now()); err != nil || !ok {
		t.Fatalf("mark settled: %v %v", ok, err)
	}
	kv, err := a.cfg.JetStream.KeyValue(ctx, events.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	settled, err := kv.Get(ctx, events.ControlKey(plan.EventID))
	if err != nil {
		t.Fatal(err)
	}
	behind, err := rollout.Open(ctx, staleControl{JetStream: a.cfg.JetStream, stale: settled})
	if err != nil {
		t.Fatal(err)
	}
	a.control = behind
	if err := a.checkOpen(ctx, plan.EventID); !errors.Is(err, errNotPlanned) {
		t.Fatalf("a plan of a rollout settled at the leader: %v, want refused", err)
	}
	if err := store.Reopen(ctx, plan.EventID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := a.checkOpen(ctx, plan.EventID); err != nil {
		t.Fatalf("a plan of the reopened rollout, a replica behind still showing it settled: %v, want it let through", err)
	}
}
