package applier

import (
	"fmt"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/rollout"
)

// TestKnownRolloutsAreBoundedByTheirVMs: the planned-VM lists the applier
// keeps in memory are bounded; past the bound the least recently used
// rollouts are let go, and read again when a plan of theirs comes.
func TestKnownRolloutsAreBoundedByTheirVMs(t *testing.T) {
	a, _, _ := fixture(t)
	ctx := t.Context()
	a.knownVMsCap = 25
	ids := []string{"switch/00000000-0000-4000-8000-000000000001", "switch/00000000-0000-4000-8000-000000000002", "switch/00000000-0000-4000-8000-000000000003"}
	for _, id := range ids {
		vms := make([]events.PlannedVM, 10)
		for i := range vms {
			vms[i] = events.PlannedVM{VMRef: events.VMRef{Namespace: "ns", Name: fmt.Sprint("vm-", i), UID: fmt.Sprint(id, "-", i)}}
		}
		if _, _, err := rollout.Create(ctx, a.cfg.JetStream, events.Rollout{EventID: id, Planned: len(vms), PlannedAt: time.Now()}, vms); err != nil {
			t.Fatal(err)
		}
		if _, err := a.knownRollout(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.knownVMs.Load(); n != 20 || a.known.Len() != 2 {
		t.Errorf("%d VMs of %d rollouts kept, want 20 of 2", n, a.known.Len())
	}
	if _, kept := a.known.Get(ids[0]); kept {
		t.Error("the least recently used rollout was kept")
	}
	if r, err := a.knownRollout(ctx, ids[0]); err != nil || len(r.batchOf) != 10 {
		t.Errorf("read again: %d VMs (%v)", len(r.batchOf), err)
	}
}
