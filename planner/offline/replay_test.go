package offline

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/readmodel/replay"
)

func TestDryRunPlansTodayAndSaysWhenSuperseded(t *testing.T) {
	// u1 is at generation 3 now; one stopped VM is pinned to generation 2.
	u1 := testenv.ClusterInstancetype("u1", 2, "4Gi")
	u1.Generation = 2
	vm := testenv.VM("ns", "a", "u1")
	rev := testenv.Pin(t, vm, u1)
	u1.Generation, u1.Spec.CPU.Guest = 3, 4
	f := testenv.StartCache(t, testenv.FakeClients([]runtime.Object{rev}, u1, vm))

	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}
	stored := []replay.Stored{{ID: events.EventID(ref.Kind, "uid-u1", 2), Type: events.TypeInstancetypeChanged,
		Change: &events.Changed{Object: ref, UID: "uid-u1", Generation: 2, OldGeneration: 1, NewSpec: json.RawMessage(`{"cpu":{"guest":2},"memory":{"guest":"4Gi"}}`)}}}
	previews, err := DryRun(f, stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(previews) != 1 || !strings.Contains(previews[0].Note, "superseded") || !strings.Contains(previews[0].Note, "generation 3") {
		t.Fatalf("previews = %+v", previews)
	}
	r := previews[0].Report
	if len(r.VMs) != 1 || r.VMs[0].Action != events.ResultNextBoot {
		t.Errorf("plan = %+v", r)
	}
}

// TestDryRunOfAChangeWhoseObjectIsGoneFails: replay --apply refuses to
// replay a change of a deleted object (it replays as the object's current
// generation, and there is none); its dry run says the same, not "moves no
// VM".
func TestDryRunOfAChangeWhoseObjectIsGoneFails(t *testing.T) {
	f := testenv.StartCache(t, testenv.FakeClients(nil))
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "gone"}
	id := events.EventID(ref.Kind, "uid-gone", 2)
	stored := []replay.Stored{{ID: id, Type: events.TypeInstancetypeChanged,
		Change: &events.Changed{Object: ref, UID: "uid-gone", Generation: 2, OldGeneration: 1, NewSpec: json.RawMessage(`{"cpu":{"guest":2},"memory":{"guest":"4Gi"}}`)}}}
	previews, err := DryRun(f, stored)
	if err == nil || !strings.Contains(err.Error(), "no longer exists") || !strings.Contains(err.Error(), id) {
		t.Fatalf("dry run of a change of a deleted object: %v, %+v", err, previews)
	}
}
