package inspect

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// TestStatusShowsTheMigrationBudget: rollout status counts the rollout's
// VMs holding a slot of the migration budget (moved, their migration not
// ended) as running or queued in KubeVirt, the live moves to come, names
// a failed migration and who holds each slot, says why live moves wait,
// and estimates the time
// left at the pace of the migrations ended so far.
func TestStatusShowsTheMigrationBudget(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	kv, err := js.KeyValue(ctx, events.BucketBus)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, v any) {
		b, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	put(events.MigrationSlotKey(0), events.MigrationSlot{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "a", UID: "1"}, At: at, Migrating: &at})
	put(events.MigrationSlotKey(1), events.MigrationSlot{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "b", UID: "2"}, At: at, FailedMigration: "m-9"})
	put(events.MigrationSlotKey(2), events.MigrationSlot{EventID: "other", VM: events.VMRef{Namespace: "ns", Name: "c", UID: "3"}, At: at})
	put(events.MigrationWaitKey, events.MigrationWait{Reason: "the KubeVirt CR is \"Deploying\"", Since: at})
	// 20 VMs planned live, 10 moved, 8 of them live after 4 minutes: 12
	// migrations to end (10 to move, b's and a's), 30 s each so far.
	a := rollout.Account{EventID: "E", Phase: rollout.PhaseRunning, Record: events.Rollout{PlannedAt: at, Counts: map[events.Result]int{events.ResultLive: 20}},
		Outcomes: map[events.Result]int{events.ResultLive: 10}, Verdicts: map[events.Observed]int{events.ObservedLive: 8}}
	if err := rollout.CountMigrations(ctx, js, &a, at.Add(4*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if m := a.Migrations; m == nil || m.Unfinished != 2 || m.Running != 1 || m.Queued != 1 || m.ToMove != 10 || m.InUse != 3 ||
		len(m.Failed) != 1 || !strings.Contains(m.Waiting, "Deploying") || m.Left != 6*time.Minute {
		t.Fatalf("migrations %+v; want 2 of E's (1 running, 1 queued), 10 to move, 3 in use, b's failure, the wait, 6m left", a.Migrations)
	}
	var out strings.Builder
	if err := WriteStatus(&out, a, printer.FormatTable); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"migrations:   1 running, 1 queued in KubeVirt", "10 live moves to come", "3 of the migration budget's slots in use: ns/a, ns/b, ns/c (other)", "ns/b (m-9)",
		"live moves wait: the KubeVirt CR is \"Deploying\"", "about 6m0s left at the pace so far (8 live in 4m0s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status %q lacks %q", out.String(), want)
		}
	}
}
