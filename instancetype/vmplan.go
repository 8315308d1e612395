package instancetype

import (
	"errors"
	"fmt"

	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
)

// Target is the generation an event moves VMs to.
type Target struct {
	events.Target
	// Spec is the target generation's spec: a *v1beta1.VirtualMachineInstancetypeSpec
	// or *v1beta1.VirtualMachinePreferenceSpec.
	Spec any
	// Skip, when set, is why no VM moves for this event (object deleted,
	// superseded by a newer generation…).
	Skip string
	// Memo shares expansion and decoding work between this event's VMs;
	// nil is fine. Not safe for concurrent use.
	Memo *Memo
	// Cluster is the KubeVirt CR's configuration, read once per target.
	Cluster Cluster
}

// PlanVM decides one VM's plan for t. It reads only what l holds, so the
// planner decides on its informer cache and the applier re-plans a VM it
// read from the API server with the same rules.
func PlanVM(l Lookup, eventID string, t Target, vm *virtv1.VirtualMachine) events.Plan {
	p := events.Plan{
		EventID: eventID,
		VM:      events.VMRef{Namespace: vm.Namespace, Name: vm.Name, UID: string(vm.UID)},
		Target:  t.Target,
	}
	skip := func(result events.Result, format string, args ...any) events.Plan {
		p.Action, p.Reason = result, fmt.Sprintf(format, args...)
		return p
	}
	if t.Skip != "" {
		return skip(events.ResultSkip, "%s", t.Skip)
	}
	preference := t.Object.IsPreference()
	ref, ok := RefOf(vm, preference)
	switch {
	case t.Move == events.MoveSwitch && ok && ref == t.Object:
		return skip(events.ResultNone, "already references %s", t.Object)
	case t.Move == events.MoveSwitch && (!ok || t.From == nil || ref != *t.From):
		return skip(events.ResultSkip, "no longer references %s%s", refString(t.From), referencesNow(ref, ok))
	case t.Move != events.MoveSwitch && (!ok || ref != t.Object):
		return skip(events.ResultSkip, "no longer references %s%s", t.Object, referencesNow(ref, ok))
	case t.Move == events.MoveSwitch && !t.Object.IsClusterScoped() && t.Object.Namespace != vm.Namespace:
		return skip(events.ResultSkip, "%s lives in another namespace than the VM", t.Object)
	}
	pin, err := PinOf(vm, preference)
	if errors.Is(err, ErrNotPinned) {
		p.Recheck = true
		return skip(events.ResultSkip, "KubeVirt has not pinned the VM to a revision yet; it will snapshot the current generation itself")
	}
	if pin, _, err = ResolvePin(l, vm.Namespace, pin); err != nil {
		p.Recheck = true
		return skip(events.ResultSkip, "%v", err)
	}
	p.Target.Pin, p.Target.FromRevision = pin.Field, pin.Revision
	if !t.Force {
		written := WrittenPaths(t.Target, pin.Field)
		if owners := FieldOwners(vm, written...); len(owners) > 0 {
			return skip(events.ResultSkip, "%s", ManagedBy(owners, written, t.Move))
		}
	}
	if t.Move == events.MoveRevert && pin.Revision == t.Revision {
		return skip(events.ResultNone, "already pinned to %s", t.Revision)
	}
	if t.Move == events.MoveRepin && pin.UID == t.UID && pin.Generation >= t.Generation {
		if pin.Generation == t.Generation {
			return skip(events.ResultNone, "already pinned to generation %d", t.Generation)
		}
		return skip(events.ResultNone, "pinned to generation %d, newer than %d", pin.Generation, t.Generation)
	}
	pinned, err := PinnedGeneration(l, vm, t.Memo)
	if err != nil {
		return skip(events.ResultSkip, "cannot read the pinned snapshot: %v", err)
	}
	in := Input{
		VM:      vm,
		VMI:     l.VMI(vm.Namespace, vm.Name),
		Pinned:  pinned,
		Target:  withSpec(pinned, t.Spec, preference),
		Cluster: t.Cluster,
		Memo:    t.Memo,
	}
	if hasRestartRequired(vm) && running(in.VMI) {
		// Only then does what the VMI started from decide anything the
		// current pin does not: whether KubeVirt clears the condition.
		in.Started, in.StartedErr = StartedFrom(l, in.VMI, t.Memo)
	}
	d := Decide(in)
	p.Action, p.Reason, p.Changes = d.Action, d.Reason, d.Changes
	return p
}

func withSpec(g Generation, spec any, preference bool) Generation {
	if preference {
		g.Preference, _ = spec.(*v1beta1.VirtualMachinePreferenceSpec)
	} else {
		g.Instancetype, _ = spec.(*v1beta1.VirtualMachineInstancetypeSpec)
	}
	return g
}

func refString(r *events.Ref) string {
	if r == nil {
		return "the source object"
	}
	return r.String()
}

// referencesNow says what a VM that left the rollout's object references
// instead: "; it references clusterinstancetype/u3 now".
func referencesNow(ref events.Ref, ok bool) string {
	if !ok {
		return "; it references none now"
	}
	return "; it references " + ref.String() + " now"
}
