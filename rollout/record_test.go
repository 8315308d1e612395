package rollout

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// TestTheFirstPlanningIsTheRecord: of two plannings of one event racing
// (a redelivery, a second replica), one record stands with its VM list,
// read back whole across chunks; the other gets that record back and
// leaves no list of its own behind. Event ids are listed without the lists.
func TestTheFirstPlanningIsTheRecord(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	const id = "switch/5b1f7d26-6b58-4f4e-9e1a-0c3a4c2f8e11"
	planning := func(batchOf func(int) int) (events.Rollout, []events.PlannedVM) {
		vms := make([]events.PlannedVM, events.VMsPerChunk+7)
		for i := range vms {
			vms[i] = events.PlannedVM{VMRef: vmRef(fmt.Sprint("uid-", i)), Batch: batchOf(i)}
		}
		return events.Rollout{EventID: id, Planned: len(vms), PlannedAt: time.Now()}, vms
	}
	var wg sync.WaitGroup
	stood := make([]events.Rollout, 2)
	created := make([]bool, 2)
	errs := make([]error, 2)
	for n := range 2 {
		wg.Go(func() {
			rec, vms := planning(func(i int) int { return (i + n) % 3 })
			stood[n], created[n], errs[n] = Create(ctx, js, rec, vms)
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || created[0] == created[1] {
		t.Fatalf("created %v, errors %v: want exactly one record created", created, errs)
	}
	winner := 0
	if created[1] {
		winner = 1
	}
	if stood[0].VMList != stood[1].VMList || stood[0].VMChunks != 2 {
		t.Fatalf("records %+v and %+v: want both the winner's, in 2 chunks", stood[0], stood[1])
	}
	vms, ok, err := PlannedVMs(ctx, js, stood[1-winner])
	if err != nil || !ok {
		t.Fatalf("planned VMs: %v (listed: %v)", err, ok)
	}
	_, want := planning(func(i int) int { return (i + winner) % 3 })
	if !slices.Equal(vms, want) {
		t.Errorf("planned VMs read back differ from the winner's planning (%d read, %d planned)", len(vms), len(want))
	}
	kv, _ := js.KeyValue(ctx, events.BucketRollouts)
	keys, _ := kv.Keys(ctx)
	if len(keys) != 1+stood[0].VMChunks {
		t.Errorf("bucket keys %v: want the record and its %d chunks, the loser's list gone", keys, stood[0].VMChunks)
	}
	if ids, err := EventIDs(ctx, js, ""); err != nil || !slices.Equal(ids, []string{id}) {
		t.Errorf("event ids %v (%v), want [%s]", ids, err, id)
	}
	if again, created, err := Create(ctx, js, events.Rollout{EventID: id, Planned: 1}, nil); err != nil || created || again.VMList != stood[0].VMList {
		t.Errorf("a later planning: %+v created %v (%v), want the first record back", again, created, err)
	}
}

// behindJS is a JetStream whose buckets' reads are answered by a replica
// that has not yet applied any write: every key reads as missing, as a
// direct get served by a replica behind the leader does.
type behindJS struct{ jetstream.JetStream }

func (b behindJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := b.JetStream.KeyValue(ctx, bucket)
	return behindKV{kv}, err
}

type behindKV struct{ jetstream.KeyValue }

func (behindKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return nil, jetstream.ErrKeyNotFound
}

// TestARecordAReplicaBehindMissesIsReadAtTheLeader: on a replicated bucket
// a read may be answered by a replica behind the leader, to which a
// record just written is missing; an applier handed the record's first
// plan dead-lettered it as no plan of kvlive's (on a three-node NATS
// cluster, 22 plans of a rollout of 2,000). A record such a read misses,
// and the VM list it names, are read again from the leader; a record the
// leader holds none of, or deleted, is absent.
func TestARecordAReplicaBehindMissesIsReadAtTheLeader(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	const id, gone = "switch/0b8b3d64-1f2f-4a4e-8a7e-2b5c3d9e0f10", "switch/7a1c2e3f-5d6b-4c8a-9e0f-1b2c3d4e5f60"
	vms := []events.PlannedVM{{VMRef: vmRef("uid-1")}, {VMRef: vmRef("uid-2")}, {VMRef: vmRef("uid-3")}}
	for _, rec := range []events.Rollout{{EventID: id, Planned: 3}, {EventID: gone, Planned: 1}} {
		if _, created, err := Create(ctx, js, rec, vms[:rec.Planned]); err != nil || !created {
			t.Fatalf("record %s: created %v, %v", rec.EventID, created, err)
		}
	}
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, events.RolloutKey(gone)); err != nil {
		t.Fatal(err)
	}
	behind := behindJS{js}
	rec, ok, err := Record(ctx, behind, id)
	if err != nil || !ok || rec.Planned != 3 {
		t.Fatalf("the record a replica behind missed: %+v, found %v, %v; want it read at the leader", rec, ok, err)
	}
	if got, listed, err := PlannedVMs(ctx, behind, rec); err != nil || !listed || !slices.Equal(got, vms) {
		t.Errorf("the VMs it planned, which the replica missed too: %v, listed %v, %v; want them read at the leader", got, listed, err)
	}
	for _, absent := range []string{gone, "switch/00000000-0000-4000-8000-000000000000"} {
		if _, ok, err := Record(ctx, behind, absent); err != nil || ok {
			t.Errorf("record %s (deleted, or never written): found %v, %v; want absent", absent, ok, err)
		}
	}
}
