package planner

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// newPlanner is a planner on js, with an empty fleet.
func newPlanner(t testing.TB, js jetstream.JetStream) *Planner {
	t.Helper()
	p, err := New(Config{Fleet: testenv.StartCache(t, testenv.FakeClients(nil)), JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// takeNoBatches makes stream again without fast batch publishes, as a
// nats-server older than 2.14 makes it.
func takeNoBatches(t testing.TB, js jetstream.JetStream, stream string) {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowBatchPublish = false
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
}

// batchPlans are n plans of edit(1): the first half of VMs that move at
// once, the rest staged as batch 1.
func batchPlans(n int) []events.Plan {
	plans := make([]events.Plan, n)
	for i := range plans {
		target := edit(1).target.Target
		target.Move = events.MoveRepin
		plans[i] = events.Plan{EventID: edit(1).eventID, Action: events.ResultLive, Target: target,
			VM: events.VMRef{Namespace: fmt.Sprint("ns", i%3), Name: fmt.Sprint("vm", i), UID: fmt.Sprint("uid-vm", i)}}
		if i >= n/2 {
			plans[i].Batch = 1
		}
	}
	return plans
}

// publishedPlans watches the plan subjects on the wire and counts, by
// stream, the plans published as part of a fast batch and alone.
type publishedPlans struct {
	mu           sync.Mutex
	batch, alone map[string]int
}

func watchPublishes(t *testing.T, js jetstream.JetStream) *publishedPlans {
	t.Helper()
	w := &publishedPlans{batch: map[string]int{}, alone: map[string]int{}}
	for stream, subject := range map[string]string{events.StreamPlans: events.PlansOf(""), events.StreamStaged: events.StagedOf("")} {
		sub, err := js.Conn().Subscribe(subject, func(m *nats.Msg) {
			if m.Header.Get(jetstream.MsgIDHeader) == "" {
				return // a batch's end, not a plan
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if strings.HasSuffix(m.Reply, ".$FI") { // nats-server's fast-ingest reply
				w.batch[stream]++
			} else {
				w.alone[stream]++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	return w
}

// counts waits until each stream's plans seen on the wire come to want
// (up to 10 s: the subscription's callbacks run on their own goroutine),
// and returns them.
func (w *publishedPlans) counts(t *testing.T, want int) (batch, alone map[string]int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		done := w.batch[events.StreamPlans]+w.alone[events.StreamPlans] >= want && w.batch[events.StreamStaged]+w.alone[events.StreamStaged] >= want
		batch, alone = maps.Clone(w.batch), maps.Clone(w.alone)
		w.mu.Unlock()
		if done || time.Now().After(deadline) {
			return batch, alone
		}
	}
}

func stored(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestARolloutsPlansGoAsOneBatchPerStream: the plans to move at once and
// the staged ones each go to their stream as one fast batch, and a
// rollout's plans published again (a redelivered event) are stored once.
func TestARolloutsPlansGoAsOneBatchPerStream(t *testing.T) {
	js := testenv.JetStream(t)
	p := newPlanner(t, js)
	wire := watchPublishes(t, js)
	plans := batchPlans(600)
	for range 2 {
		if err := p.publishPlans(t.Context(), edit(1), plans); err != nil {
			t.Fatal(err)
		}
	}
	batch, alone := wire.counts(t, 600)
	if batch[events.StreamPlans] != 600 || batch[events.StreamStaged] != 600 || len(alone) != 0 {
		t.Errorf("published in a batch %v, alone %v; want the 300 plans of each stream in a batch, twice", batch, alone)
	}
	for _, stream := range []string{events.StreamPlans, events.StreamStaged} {
		if n := stored(t, js, stream); n != 300 {
			t.Errorf("%s holds %d plans, want 300: each once", stream, n)
		}
	}
}

// TestPlansGoOneByOneWhereTheStreamTakesNoBatch: a plans stream without
// fast batch publishes (made by a nats-server older than 2.14, which drops
// the flag) gets its plans one by one, the staged stream still as a batch.
func TestPlansGoOneByOneWhereTheStreamTakesNoBatch(t *testing.T) {
	js := testenv.JetStream(t)
	takeNoBatches(t, js, events.StreamPlans)
	p := newPlanner(t, js)
	wire := watchPublishes(t, js)
	if err := p.publishPlans(t.Context(), edit(1), batchPlans(600)); err != nil {
		t.Fatal(err)
	}
	batch, alone := wire.counts(t, 300)
	if alone[events.StreamPlans] != 300 || batch[events.StreamStaged] != 300 || batch[events.StreamPlans]+alone[events.StreamStaged] != 0 {
		t.Errorf("published in a batch %v, alone %v; want the plans stream's 300 alone, the staged stream's in a batch", batch, alone)
	}
	if n := stored(t, js, events.StreamPlans); n != 300 {
		t.Errorf("%s holds %d plans, want 300", events.StreamPlans, n)
	}
}

// TestPlansGoOneByOneOnceTheStreamRefusesABatch: a plans stream that stops
// taking fast batches after the planner read it (made again by an older
// server) refuses the batch; the planner publishes the plans one by one,
// and so from then on.
func TestPlansGoOneByOneOnceTheStreamRefusesABatch(t *testing.T) {
	js := testenv.JetStream(t)
	p := newPlanner(t, js)
	if ok, err := p.batched(t.Context(), events.StreamPlans); err != nil || !ok {
		t.Fatalf("the plans stream as Setup made it: batched %v %v, want true", ok, err)
	}
	takeNoBatches(t, js, events.StreamPlans)
	if err := p.publishPlans(t.Context(), edit(1), batchPlans(600)); err != nil {
		t.Fatal(err)
	}
	if n := stored(t, js, events.StreamPlans); n != 300 {
		t.Errorf("%s holds %d plans, want 300", events.StreamPlans, n)
	}
	if ok, _ := p.batchable.Load(events.StreamPlans); ok != false {
		t.Errorf("the planner still takes the plans stream for one with batches")
	}
}

// TestABatchsPlansGoOutAsTheyAreMade: a batch's first plan is stored before
// the next is asked for, so a large rollout, recorded before its plans,
// never waits with none of them in a stream while the rest are encoded
// (its account would read every VM unaccounted for: some seconds for
// 100,000 plans).
func TestABatchsPlansGoOutAsTheyAreMade(t *testing.T) {
	js := testenv.JetStream(t)
	p := newPlanner(t, js)
	plans := batchPlans(10)
	for i := range plans {
		plans[i].Batch = 0
	}
	w := edit(1)
	seq := func(yield func(*events.Plan) bool) {
		if !yield(&plans[0]) {
			return
		}
		for deadline := time.Now().Add(10 * time.Second); stored(t, js, events.StreamPlans) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("the first plan not stored 10 s after it was handed over, the rest not asked for yet")
				break
			}
		}
		for i := 1; i < len(plans) && yield(&plans[i]); i++ {
		}
	}
	message := func(plan *events.Plan) (*nats.Msg, error) {
		return p.planMessage(t.Context(), w, plan, time.Now(), false)
	}
	if err := p.publishBatch(t.Context(), events.StreamPlans, seq, message); err != nil {
		t.Fatal(err)
	}
	if n := stored(t, js, events.StreamPlans); n != 10 {
		t.Errorf("%s holds %d plans, want 10", events.StreamPlans, n)
	}
}
