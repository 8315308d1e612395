package instancetype

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// AtMove records vm as a move's write left it (the API server's answer to
// the write) and the migration vmi (the cache's, or nil) showed then.
// specWrite says the write changed the VM's spec, so its generation is the
// one virt-controller's status.desiredGeneration reaches once it has
// looked.
func AtMove(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, specWrite bool) *events.AtMove {
	if vm == nil {
		return nil
	}
	a := &events.AtMove{}
	if specWrite {
		a.Generation = vm.Generation
	}
	for _, c := range vm.Status.Conditions {
		if c.Type != virtv1.VirtualMachineRestartRequired && c.Type != virtv1.VirtualMachineFailure {
			continue
		}
		a.Conditions = append(a.Conditions, events.Condition{Type: string(c.Type), Status: string(c.Status),
			Reason: c.Reason, Message: c.Message, Since: c.LastTransitionTime.UTC()})
	}
	if vmi != nil && vmi.Status.MigrationState != nil {
		a.Migration = string(vmi.Status.MigrationState.MigrationUID)
	}
	return a
}

// looked reports whether virt-controller has synced vm since the move: its
// status.desiredGeneration reached the generation the move's spec write
// made. A status write (a re-pin in status) leaves the generation, and
// nothing then tells.
func looked(o events.Outcome, vm *virtv1.VirtualMachine) bool {
	return o.AtMove != nil && o.AtMove.Generation > 0 && vm.Status.DesiredGeneration >= o.AtMove.Generation
}

// answers reports whether the VM's condition c is KubeVirt's answer to the
// move of o rather than what stood before it. With what the write left
// (o.AtMove): a condition set, changed or rewritten with another time
// since, or any condition once virt-controller is seen to have synced the
// moved spec. Without (an older record, or a VM an earlier attempt moved):
// a transition no earlier than since, the second before the move.
func answers(o events.Outcome, vm *virtv1.VirtualMachine, c virtv1.VirtualMachineCondition, since metav1.Time) bool {
	if o.AtMove == nil {
		return !c.LastTransitionTime.Before(&since)
	}
	return looked(o, vm) || !unchanged(o, c)
}

// unchanged reports whether c is the condition the move's write left.
func unchanged(o events.Outcome, c virtv1.VirtualMachineCondition) bool {
	if o.AtMove == nil {
		return false
	}
	was, ok := o.AtMove.Condition(string(c.Type))
	return ok && was.Status == string(c.Status) && was.Reason == c.Reason && was.Message == c.Message &&
		was.Since.Equal(c.LastTransitionTime.UTC())
}
