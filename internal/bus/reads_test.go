package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/internal/bus"
	"kvlive/internal/testenv"
)

// replicated creates an R3 stream of n messages and an R3 bucket with one
// key on c, through a connection to every node.
func replicated(t *testing.T, c *cluster, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(c.connect(c.others("")...))
	if err != nil {
		t.Fatal(err)
	}
	answered(t, ctx, "create stream S", func(ctx context.Context) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
		return err
	})
	// In rounds a slow machine (the race detector) keeps up with.
	for i := range n {
		if _, err := js.PublishAsync(fmt.Sprintf("s.%d", i%10), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publishing timed out")
			}
		}
	}
	var kv jetstream.KeyValue
	answered(t, ctx, "create bucket B", func(ctx context.Context) (err error) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B", Replicas: 3})
		return err
	})
	answered(t, ctx, "put key k", func(ctx context.Context) error {
		_, err := kv.PutString(ctx, "k", "v")
		return err
	})
}

// answered tries a request of a cluster's set-up until it is answered, 10 s
// a try, until ctx ends: a cluster that has just formed can leave a
// replicated create unanswered for a whole try (CI saw a minute go by).
func answered(t *testing.T, ctx context.Context, what string, try func(context.Context) error) {
	t.Helper()
	for {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := try(tctx)
		cancel()
		switch {
		case err == nil:
			return
		case ctx.Err() != nil:
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %v; trying again", what, err)
	}
}

// readAcrossAKill starts a cluster holding n messages in stream S, and
// returns it with a plain connection to probe it and kvlive's reading one.
func readAcrossAKill(t *testing.T, n int) (*cluster, jetstream.JetStream, jetstream.JetStream) {
	t.Helper()
	c := startCluster(t, 3)
	replicated(t, c, n)
	probe, err := jetstream.New(c.connect(c.others("")...))
	if err != nil {
		t.Fatal(err)
	}
	js, err := bus.NewJetStream(c.connect(c.others("")...), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c, probe, js
}

// TestScanRidesOutALeaderChange kills the node that serves Scan its
// messages (the node holding its consumer, which may lead the stream too)
// midway through a read of a replicated stream: the read resumes from
// another node, and every message is read once, in order.
func TestScanRidesOutALeaderChange(t *testing.T) {
	const n = 20000
	c, probe, js := readAcrossAKill(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []int
	err := bus.Scan(ctx, js, "S", jetstream.OrderedConsumerConfig{}, func(m jetstream.Msg) {
		i, err := strconv.Atoi(string(m.Data()))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
		if len(got) == n/3 {
			victim := consumerNode(ctx, t, probe, "S")
			t.Logf("killing %s, which holds the scan's consumer", victim)
			c.kill(victim)
		}
	})
	if err != nil {
		t.Fatalf("scan: %v (read %d of %d)", err, len(got), n)
	}
	if len(got) != n {
		t.Fatalf("read %d messages, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d is %d: read twice or out of order", i, v)
		}
	}
}

// killingTheLeaderOf starts a cluster holding n messages in stream S and
// bucket B (replicated), and returns kvlive's reading JetStream on the
// nodes that do not lead stream, and the function that kills the one that
// does.
func killingTheLeaderOf(t *testing.T, stream string, n int) (jetstream.JetStream, func()) {
	t.Helper()
	c := startCluster(t, 3)
	replicated(t, c, n)
	probe, err := jetstream.New(c.connect(c.others("")...))
	if err != nil {
		t.Fatal(err)
	}
	leader := streamLeader(t, probe, stream)
	for _, other := range []string{"S", "KV_B"} {
		if l := streamLeader(t, probe, other); l != leader {
			t.Logf("%s is led by %s, %s by %s: killing %s", stream, leader, other, l, leader)
		}
	}
	js, err := bus.NewJetStream(c.connect(c.others(leader)...), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return js, func() { c.kill(leader) }
}

// TestReadsRideOutALeaderChange kills the node leading a replicated stream
// and a bucket, then reads both at once, while the cluster elects new
// leaders: the reads wait for them instead of failing.
func TestReadsRideOutALeaderChange(t *testing.T) {
	js, kill := killingTheLeaderOf(t, "S", 10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kill()
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 {
		t.Errorf("stream S holds %d messages, want 10", info.State.Msgs)
	}
	if _, err := s.GetMsg(ctx, 3); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("bucket B key k: %v", err)
	}
	if _, err := kv.Get(ctx, "missing"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a missing key: %v, want the server's own not found", err)
	}
}

// TestReadsGiveUpAtTheirBound: with every server gone, a read fails after
// its bound, saying what it read and what it tried, instead of waiting for
// ever or failing at the first "no responders".
func TestReadsGiveUpAtTheirBound(t *testing.T) {
	c := startCluster(t, 3)
	replicated(t, c, 1)
	js, err := bus.NewJetStream(c.connect(c.others("")...), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.others("") {
		c.kill(name)
	}
	start := time.Now()
	_, err = s.Info(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatal("stream info with every server down succeeded")
	}
	for _, want := range []string{"stream S: info", "tried", "times over"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if took < time.Second || took > 20*time.Second {
		t.Errorf("gave up after %v, with a bound of 2s", took)
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("rollout: stream X: %w", nats.ErrNoResponders), true},
		{nats.ErrTimeout, true},
		{context.DeadlineExceeded, true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{jetstream.ErrNoHeartbeat, true},
		{jetstream.ErrStreamNotFound, false},
		{jetstream.ErrKeyNotFound, false},
		{jetstream.ErrKeyExists, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence"}, false},
		{errors.New("boom"), false},
		{nil, false},
	} {
		if got := bus.Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// consumerNode is the node holding the consumer stream is read through:
// the newest, since an ordered consumer that reset (its heartbeats missed
// on a loaded machine) deletes the one it replaced in the background, and
// a listing may still show both.
func consumerNode(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var newest *jetstream.ConsumerInfo
	n := 0
	for info := range s.ListConsumers(ctx).Info() {
		if info.Cluster == nil {
			continue
		}
		n++
		if newest == nil || info.Created.After(newest.Created) {
			newest = info
		}
	}
	if newest == nil {
		t.Fatalf("stream %s has no replicated consumer", stream)
	}
	if n > 1 {
		t.Logf("stream %s has %d consumers; the newest, %s, is the read's", stream, n, newest.Name)
	}
	return newest.Cluster.Leader
}

// TestTailRidesOutALeaderChange is TestScanRidesOutALeaderChange for a
// Tail, which a command following a rollout reads with short waits.
func TestTailRidesOutALeaderChange(t *testing.T) {
	const n = 20000
	c, probe, js := readAcrossAKill(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tail := bus.NewTail(js, "S", jetstream.OrderedConsumerConfig{})
	defer tail.Stop()
	var got []int
	for len(got) < n {
		m, err := tail.Next(ctx, 250*time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			t.Fatalf("tail: %v (read %d of %d)", err, len(got), n)
		}
		i, err := strconv.Atoi(string(m.Data()))
		if err != nil {
			t.Fatal(err)
		}
		if i != len(got) {
			t.Fatalf("message %d is %d: read twice or out of order", len(got), i)
		}
		got = append(got, i)
		if len(got) == n/3 {
			victim := consumerNode(ctx, t, probe, "S")
			t.Logf("killing %s, which holds the tail's consumer", victim)
			c.kill(victim)
		}
	}
}

// failingOnce is a JetStream whose buckets fail their first key listing as
// a leader election would, after nats.go has started it with the filters
// it was given.
type failingOnce struct{ jetstream.JetStream }

func (f failingOnce) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := f.JetStream.KeyValue(ctx, bucket)
	return &listFailsOnce{KeyValue: kv}, err
}

type listFailsOnce struct {
	jetstream.KeyValue
	failed bool
}

func (kv *listFailsOnce) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	l, err := kv.KeyValue.ListKeysFiltered(ctx, filters...)
	if err != nil || kv.failed {
		return l, err
	}
	kv.failed = true
	_ = l.Stop()
	return nil, nats.ErrTimeout
}

// TestAKeyListingTriedAgainAsksForTheSameKeys: a filtered key listing that
// meets a leader election is tried again for the keys asked, not for the
// filters nats.go rewrote on the first try (the bucket's prefix written
// into them, which a second try took for an invalid key: the migration
// budget's slots went unread on a NATS cluster while its leaders moved).
func TestAKeyListingTriedAgainAsksForTheSameKeys(t *testing.T) {
	ctx := t.Context()
	raw := testenv.BareJetStream(t)
	kv, err := raw.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"migrations.slot-0", "migrations.slot-1", "other"} {
		if _, err := kv.PutString(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	read, err := bus.Reads(failingOnce{raw}, 10*time.Second).KeyValue(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	l, err := read.ListKeysFiltered(ctx, "migrations.>")
	if err != nil {
		t.Fatalf("the listing tried again: %v", err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	if want := []string{"migrations.slot-0", "migrations.slot-1"}; !slices.Equal(keys, want) {
		t.Errorf("listed %v, want %v", keys, want)
	}
}

// TestAKeyAtTheLeaderRidesOutAnElection: a key read from the leader of a
// replicated bucket's stream, as its leader is killed, waits for the new
// one and reads the value; a key never written reads as absent.
func TestAKeyAtTheLeaderRidesOutAnElection(t *testing.T) {
	js, kill := killingTheLeaderOf(t, "KV_B", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kill()
	if v, ok, err := bus.KeyAtLeader(ctx, js, "B", "k"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("key k at the leader, its leader killed: %q, found %v, %v", v, ok, err)
	}
	if _, ok, err := bus.KeyAtLeader(ctx, js, "B", "missing"); err != nil || ok {
		t.Errorf("a key never written: found %v, %v; want absent", ok, err)
	}
}
