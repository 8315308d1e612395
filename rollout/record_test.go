package rollout

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

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
