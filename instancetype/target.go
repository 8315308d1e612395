package instancetype

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/events"
)

// Objects finds the live instance types and preferences an event names.
type Objects interface {
	// Object returns the live object ref names, or nil.
	Object(ref events.Ref) any
}

// ChangeTarget moves VMs to the event's generation, unless the object was
// deleted, re-created, or has moved on (its newer event moves the VMs).
func ChangeTarget(o Objects, cluster Cluster, c events.Changed) (Target, error) {
	t := Target{Target: events.Target{Move: events.MoveRepin, Object: c.Object, UID: c.UID, Generation: c.Generation}, Memo: &Memo{}, Cluster: cluster}
	spec, err := DecodeSpec(c.NewSpec, c.Object.IsPreference())
	if err != nil {
		return t, &events.DecodeError{Reason: events.ReasonInvalid, Err: err}
	}
	t.Spec = spec
	live, ok := o.Object(c.Object).(metav1.Object)
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
func CurrentTarget(o Objects, cluster Cluster, ref events.Ref) Target {
	t := Target{Target: events.Target{Move: events.MoveRepin, Object: ref}, Memo: &Memo{}, Cluster: cluster}
	live := o.Object(ref)
	spec, ok := SpecOf(live)
	if !ok {
		t.Skip = fmt.Sprintf("%s does not exist", ref)
		return t
	}
	m := live.(metav1.Object)
	t.UID, t.Generation, t.Spec = string(m.GetUID()), m.GetGeneration(), spec
	return t
}

// SwitchTarget moves VMs from one object to another's current generation.
func SwitchTarget(o Objects, cluster Cluster, from, to events.Ref) Target {
	t := CurrentTarget(o, cluster, to)
	t.Move, t.From = events.MoveSwitch, &from
	return t
}
