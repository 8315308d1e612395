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
// ended), names a failed migration and says why live moves wait.
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
	put(events.MigrationSlotKey(0), events.MigrationSlot{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "a", UID: "1"}, At: at})
	put(events.MigrationSlotKey(1), events.MigrationSlot{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "b", UID: "2"}, At: at, FailedMigration: "m-9"})
	put(events.MigrationSlotKey(2), events.MigrationSlot{EventID: "other", VM: events.VMRef{Namespace: "ns", Name: "c", UID: "3"}, At: at})
	put(events.MigrationWaitKey, events.MigrationWait{Reason: "the KubeVirt CR is \"Deploying\"", Since: at})
	a := rollout.Account{EventID: "E"}
	if err := rollout.CountMigrations(ctx, js, &a); err != nil {
		t.Fatal(err)
	}
	if m := a.Migrations; m == nil || m.Unfinished != 2 || m.InUse != 3 || len(m.Failed) != 1 || !strings.Contains(m.Waiting, "Deploying") {
		t.Fatalf("migrations %+v; want 2 of E's, 3 in use, b's failure, the wait", a.Migrations)
	}
	var out strings.Builder
	if err := WriteStatus(&out, a, printer.FormatTable); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"migrations:   2 of its VMs moved", "3 of the migration budget's slots in use", "ns/b (m-9)", "live moves wait: the KubeVirt CR is \"Deploying\""} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status %q lacks %q", out.String(), want)
		}
	}
}
