package planner

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/events"
	"kvlive/internal/fleet"
	"kvlive/planner/liveplan"
)

// ChangeTarget moves VMs to the event's generation, unless the object was
// deleted, re-created, or has moved on (its newer event moves the VMs).
func ChangeTarget(f *fleet.Fleet, c events.Changed) (Target, error) {
	t := Target{Target: events.Target{Move: events.MoveRepin, Object: c.Object, UID: c.UID, Generation: c.Generation}, Memo: &liveplan.Memo{}, Cluster: cluster(f)}
	spec, err := fleet.DecodeSpec(c.NewSpec, c.Object.IsPreference())
	if err != nil {
		return t, &events.DecodeError{Reason: events.ReasonInvalid, Err: err}
	}
	t.Spec = spec
	live, ok := f.Object(c.Object).(metav1.Object)
	switch {
	case !ok:
		t.Skip = fmt.Sprintf("%s was deleted after generation %d was observed", c.Object, c.Generation)
	case string(live.GetUID()) != c.UID:
		t.Skip = fmt.Sprintf("%s was deleted and re-created after generation %d was observed", c.Object, c.Generation)
	case live.GetGeneration() > c.Generation:
		t.Skip = fmt.Sprintf("superseded: %s is at generation %d, whose own event moves the VMs", c.Object, live.GetGeneration())
	}
	return t, nil
}

// CurrentTarget moves VMs to ref's current generation: what `kvlive plan`
// evaluates, and what an edit's event does once it arrives.
func CurrentTarget(f *fleet.Fleet, ref events.Ref) Target {
	t := Target{Target: events.Target{Move: events.MoveRepin, Object: ref}, Memo: &liveplan.Memo{}, Cluster: cluster(f)}
	live := f.Object(ref)
	spec, ok := fleet.SpecOf(live)
	if !ok {
		t.Skip = fmt.Sprintf("%s does not exist", ref)
		return t
	}
	m := live.(metav1.Object)
	t.UID, t.Generation, t.Spec = string(m.GetUID()), m.GetGeneration(), spec
	return t
}

// SwitchTarget moves VMs from one object to another's current generation.
func SwitchTarget(f *fleet.Fleet, from, to events.Ref) Target {
	t := CurrentTarget(f, to)
	t.Move, t.From = events.MoveSwitch, &from
	return t
}

func cluster(f *fleet.Fleet) *liveplan.Cluster {
	c := f.Cluster()
	return &c
}
