package applier

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// TestAPlanIsBoundToWhatItsRolloutRecorded: under a real undo's event id
// and for a VM it planned, a plan that reverts to another revision or
// snapshot than the recorded one, or moves otherwise than the rollout
// does, is no plan of the planner's; the one it made is.
func TestAPlanIsBoundToWhatItsRolloutRecorded(t *testing.T) {
	ctx := context.Background()
	js := testenv.JetStream(t)
	clients := testenv.FakeClients(nil)
	a, err := New(Config{Clients: clients, Fleet: testenv.StartCache(t, clients), JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	const eventID = "undo/8c0e4b1a-2f7d-4e3a-9b6c-1d5f0a7e2c94"
	object := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}
	planned := events.Plan{EventID: eventID, VM: events.VMRef{Namespace: "ns", Name: "a", UID: "uid-a"}, Action: events.ResultNextBoot,
		Target: events.Target{Move: events.MoveRevert, Object: object, Revision: "a-u1-v1beta1-uid-u1-1",
			Snapshot: json.RawMessage(`{"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": "VirtualMachineClusterInstancetype"}`)}}
	if _, _, err := rollout.Create(ctx, js, events.Rollout{EventID: eventID, Type: string(events.MoveRevert), Object: object, Planned: 1,
		Counts: map[events.Result]int{events.ResultNextBoot: 1}},
		[]events.PlannedVM{{VMRef: planned.VM, Revert: events.RevertDigest(planned.Target)}}); err != nil {
		t.Fatal(err)
	}
	// The plan as the wire carries it: its snapshot compacted.
	wire, err := json.Marshal(planned)
	if err != nil {
		t.Fatal(err)
	}
	var received events.Plan
	if err := json.Unmarshal(wire, &received); err != nil {
		t.Fatal(err)
	}
	if _, err := a.checkPlanned(ctx, received); err != nil {
		t.Errorf("the planner's own plan: %v", err)
	}
	otherSnapshot, otherRevision, otherMove := received, received, received
	otherSnapshot.Target.Snapshot = json.RawMessage(`{"apiVersion":"instancetype.kubevirt.io/v1beta1","kind":"VirtualMachineClusterInstancetype","spec":{"cpu":{"guest":64}}}`)
	otherRevision.Target.Revision = "a-u1-v1beta1-uid-u1-9"
	otherMove.Target = events.Target{Move: events.MoveRepin, Object: object, Generation: 9}
	for name, forged := range map[string]events.Plan{"its own snapshot": otherSnapshot, "another revision": otherRevision, "a re-pin": otherMove} {
		if _, err := a.checkPlanned(ctx, forged); !errors.Is(err, errNotPlanned) {
			t.Errorf("a forged plan with %s: %v, want it refused as not planned", name, err)
		}
	}

	// A re-pin's VM, switched by a plan under the re-pin's id: no revert
	// digest tells it apart, the rollout's move does.
	const repinID = "VirtualMachineClusterInstancetype/uid-u1/3"
	repin := events.Plan{EventID: repinID, VM: planned.VM, Action: events.ResultNextBoot,
		Target: events.Target{Move: events.MoveRepin, Object: object, Generation: 3}}
	if _, _, err := rollout.Create(ctx, js, events.Rollout{EventID: repinID, Type: string(events.MoveRepin), Object: object, Planned: 1,
		Counts: map[events.Result]int{events.ResultNextBoot: 1}}, []events.PlannedVM{{VMRef: repin.VM}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.checkPlanned(ctx, repin); err != nil {
		t.Errorf("the re-pin's own plan: %v", err)
	}
	switched := repin
	switched.Target = events.Target{Move: events.MoveSwitch, Object: object, From: &events.Ref{Kind: events.KindClusterInstancetype, Name: "u0"}}
	if _, err := a.checkPlanned(ctx, switched); !errors.Is(err, errNotPlanned) {
		t.Errorf("a switch under the re-pin's id: %v, want it refused as not planned", err)
	}
}
