package watcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/watcher"
)

// startWatcher runs a watcher until the returned stop is called.
func startWatcher(t *testing.T, clients kube.Clients, js jetstream.JetStream, configure ...func(*watcher.Config)) (stop func()) {
	stop, _ = startWatcherOf(t, clients, js, configure...)
	return stop
}

// startWatcherOf is startWatcher that also returns the watcher.
func startWatcherOf(t *testing.T, clients kube.Clients, js jetstream.JetStream, configure ...func(*watcher.Config)) (stop func(), w *watcher.Watcher) {
	t.Helper()
	fleet, err := kube.NewCache(clients, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := watcher.Config{Informers: fleet.ObjectInformers(), JetStream: js, Tracer: sdktrace.NewTracerProvider()}
	for _, c := range configure {
		c(&cfg)
	}
	w, err = watcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fleet.Start(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
			fleet.Shutdown()
		}
	}
	t.Cleanup(stop)
	return stop, w
}

// waitRecorded waits until the watcher has recorded n objects.
func waitRecorded(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), events.BucketGenerations)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the watcher's records", func() bool {
		keys, err := kv.Keys(context.Background())
		return (err == nil || errors.Is(err, jetstream.ErrNoKeysFound)) && len(keys) == n
	})
}

// changes returns every change event in the stream, in order, once there are want of them.
func changes(t *testing.T, js jetstream.JetStream, want int) []events.Changed {
	t.Helper()
	s, err := js.Stream(context.Background(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "change events", func() bool {
		info, err := s.Info(context.Background())
		return err == nil && int(info.State.Msgs) >= want
	})
	info, _ := s.Info(context.Background())
	var out []events.Changed
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		var c events.Changed
		if _, err := events.Decode(m.Data, events.TypeInstancetypeChanged, &c); err != nil {
			t.Fatal(err)
		}
		if m.Header.Get("traceparent") == "" {
			t.Error("event without traceparent header")
		}
		out = append(out, c)
	}
	return out
}

func TestWatcherEmitsOnGenerationChangeOnly(t *testing.T) {
	js := testenv.JetStream(t)
	clients := testenv.FakeClients(nil, testenv.ClusterInstancetype("u1", 2, "2Gi"), testenv.ClusterInstancetype("u2", 4, "2Gi"))
	startWatcher(t, clients, js)
	waitRecorded(t, js, 2) // first sight: recorded, not emitted
	its := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	ctx := context.Background()

	// A metadata-only update keeps the generation: no event.
	u1, _ := its.Get(ctx, "u1", metav1.GetOptions{})
	u1.Labels = map[string]string{"owner": "team-a"}
	if _, err := its.Update(ctx, u1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A spec edit: the API server bumps the generation (the fake does not).
	u2, _ := its.Get(ctx, "u2", metav1.GetOptions{})
	u2.Spec.CPU.Guest, u2.Generation = 8, 2
	if _, err := its.Update(ctx, u2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := changes(t, js, 1)
	if len(got) != 1 {
		t.Fatalf("%d events, want 1: %+v", len(got), got)
	}
	c := got[0]
	if c.Object.Name != "u2" || c.UID != "uid-u2" || c.Generation != 2 || c.OldGeneration != 1 {
		t.Errorf("event = %+v", c)
	}
	var oldSpec, newSpec v1beta1.VirtualMachineInstancetypeSpec
	_ = json.Unmarshal(c.OldSpec, &oldSpec)
	_ = json.Unmarshal(c.NewSpec, &newSpec)
	if oldSpec.CPU.Guest != 4 || newSpec.CPU.Guest != 8 {
		t.Errorf("old/new vCPUs = %d/%d, want 4/8", oldSpec.CPU.Guest, newSpec.CPU.Guest)
	}
}

// editedWhileStopped records every instance type of clients with a
// watcher, stops it, and edits u1 to generation 2 (3 vCPUs) while no
// watcher runs.
func editedWhileStopped(t *testing.T, clients kube.Clients, js jetstream.JetStream, objects int) {
	t.Helper()
	stop := startWatcher(t, clients, js)
	waitRecorded(t, js, objects)
	stop()
	its := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	u1, _ := its.Get(t.Context(), "u1", metav1.GetOptions{})
	u1.Spec.CPU.Guest, u1.Generation = 3, 2
	if _, err := its.Update(t.Context(), u1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherCatchesUpAfterRestart(t *testing.T) {
	js := testenv.JetStream(t)
	clients := testenv.FakeClients(nil, testenv.ClusterInstancetype("u1", 2, "2Gi"), testenv.ClusterInstancetype("u2", 4, "2Gi"))
	editedWhileStopped(t, clients, js, 2)
	its := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	ctx := context.Background()
	startWatcher(t, clients, js)
	got := changes(t, js, 1)
	if len(got) != 1 || got[0].Object.Name != "u1" || got[0].Generation != 2 || got[0].OldGeneration != 1 {
		t.Fatalf("events after restart = %+v, want u1 1→2 only", got)
	}
	// And a further edit after the restart is seen too, with the right old spec.
	u1, _ := its.Get(ctx, "u1", metav1.GetOptions{})
	u1.Spec.CPU.Guest, u1.Generation = 5, 3
	if _, err := its.Update(ctx, u1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = changes(t, js, 2)
	if len(got) != 2 || got[1].Generation != 3 || got[1].OldGeneration != 2 {
		t.Fatalf("events = %+v", got)
	}
	var oldSpec v1beta1.VirtualMachineInstancetypeSpec
	_ = json.Unmarshal(got[1].OldSpec, &oldSpec)
	if oldSpec.CPU.Guest != 3 {
		t.Errorf("old spec vCPUs = %d, want 3", oldSpec.CPU.Guest)
	}
}

// TestWatcherNeverGivesUpOnAChange: with the events stream gone, publishing
// fails again and again (far more often than the 15 attempts after which
// the watcher used to give up until restart); once the stream is back, the
// edit is published, and /readyz's view of the backlog clears.
func TestWatcherNeverGivesUpOnAChange(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	clients := testenv.FakeClients(nil, testenv.ClusterInstancetype("u1", 2, "2Gi"))
	var log testenv.LogBuffer
	_, w := startWatcherOf(t, clients, js, func(c *watcher.Config) {
		c.RetryMin, c.RetryMax = time.Millisecond, 5*time.Millisecond
		c.Log = slog.New(slog.NewTextHandler(&log, nil))
	})
	waitRecorded(t, js, 1)
	if err := js.DeleteStream(ctx, events.StreamEvents); err != nil {
		t.Fatal(err)
	}
	its := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	u1, _ := its.Get(ctx, "u1", metav1.GetOptions{})
	u1.Spec.CPU.Guest, u1.Generation = 3, 2
	if _, err := its.Update(ctx, u1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the failed publish to show in the backlog", func() bool {
		n, err := w.Unpublished()
		return n == 1 && err != nil
	})
	testenv.Eventually(t, 2*time.Minute, "more failed attempts than the watcher used to make before giving up", func() bool {
		return strings.Count(log.String(), "sync failed") > 20
	})
	if err := events.Setup(ctx, js, events.DefaultStreamOptions(), nil); err != nil {
		t.Fatal(err)
	}
	got := changes(t, js, 1)
	if len(got) != 1 || got[0].Generation != 2 {
		t.Fatalf("events after the stream came back = %+v", got)
	}
	testenv.Eventually(t, 30*time.Second, "the backlog to clear", func() bool { n, _ := w.Unpublished(); return n == 0 })
}

// TestWatcherForgetsDeletedObjects: the generations bucket holds records of
// objects that exist, not of every object ever seen.
func TestWatcherForgetsDeletedObjects(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	clients := testenv.FakeClients(nil, testenv.ClusterInstancetype("u1", 2, "2Gi"), testenv.ClusterInstancetype("u2", 4, "2Gi"))
	startWatcher(t, clients, js)
	waitRecorded(t, js, 2)
	if err := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Delete(ctx, "u2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, js, 1)
	kv, _ := js.KeyValue(ctx, events.BucketGenerations)
	if _, err := kv.Get(ctx, "uid-u2"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("record of deleted u2: %v, want gone", err)
	}
}

// missingOnce is a JetStream whose generations bucket answers the first
// read of each key as a replica behind the leader would: missing.
type missingOnce struct {
	jetstream.JetStream
	mu     sync.Mutex
	missed map[string]bool
}

func (m *missingOnce) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := m.JetStream.KeyValue(ctx, bucket)
	return missesOnce{KeyValue: kv, m: m}, err
}

type missesOnce struct {
	jetstream.KeyValue
	m *missingOnce
}

func (kv missesOnce) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv.m.mu.Lock()
	first := !kv.m.missed[key]
	kv.m.missed[key] = true
	kv.m.mu.Unlock()
	if first {
		return nil, jetstream.ErrKeyNotFound
	}
	return kv.KeyValue.Get(ctx, key)
}

// TestAnEditAReplicaBehindMissesIsEmitted: an object edited while no
// watcher ran is compared, on the next start, with its record; a read of
// the record answered by a replica behind the leader misses it, and the
// object, taken for new, was recorded as seen (the record's creation
// conflicting, silently): its edit was never emitted. It is read again and
// emitted.
func TestAnEditAReplicaBehindMissesIsEmitted(t *testing.T) {
	js := testenv.JetStream(t)
	clients := testenv.FakeClients(nil, testenv.ClusterInstancetype("u1", 2, "2Gi"))
	editedWhileStopped(t, clients, js, 1)
	startWatcher(t, clients, &missingOnce{JetStream: js, missed: map[string]bool{}})
	got := changes(t, js, 1)
	if len(got) != 1 || got[0].Generation != 2 || got[0].OldGeneration != 1 {
		t.Fatalf("events = %+v, want u1 1→2", got)
	}
}

// TestAnEditBeforeTheFirstLookIsEmitted: an instance type edited after
// the informer listed it but before the watcher's first look at it (a
// fresh start, its queue still full of the list) is recorded as listed
// and its edit emitted, not taken for a first sighting at the new
// generation. Issue 59, item 8: an edit 1.4 s after "watcher started"
// never became an event.
func TestAnEditBeforeTheFirstLookIsEmitted(t *testing.T) {
	js := testenv.JetStream(t)
	clients := testenv.FakeClients(nil, testenv.ClusterInstancetype("u1", 2, "2Gi"))
	fleet, err := kube.NewCache(clients, "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.New(watcher.Config{Informers: fleet.ObjectInformers(), JetStream: js, Tracer: sdktrace.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet.Start(ctx)
	testenv.Eventually(t, 10*time.Second, "u1 listed and queued", func() bool { return w.QueueDepth() == 1 })
	its := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	u1, _ := its.Get(ctx, "u1", metav1.GetOptions{})
	u1.Spec.CPU.Guest, u1.Generation = 4, 2
	if _, err := its.Update(ctx, u1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	inf := fleet.ObjectInformers()[events.KindClusterInstancetype]
	testenv.Eventually(t, 10*time.Second, "the edit in the cache", func() bool {
		obj, ok, _ := inf.GetIndexer().GetByKey("u1")
		return ok && obj.(metav1.Object).GetGeneration() == 2
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	got := changes(t, js, 1)
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	fleet.Shutdown()
	if len(got) != 1 || got[0].OldGeneration != 1 || got[0].Generation != 2 {
		t.Fatalf("events %+v; want u1's edit from generation 1 to 2", got)
	}
}
