// Package restart plans the restart of running VMs that wait for one: those
// KubeVirt flagged RestartRequired after their instance type or preference
// moved. A restart is KubeVirt's own, as virt-api's restart subresource
// writes it (pkg/virt-api/rest/lifecycle.go at v1.9.0): a Stop naming the
// running VMI's UID, then a Start, in the VM's status.stateChangeRequests,
// which virt-controller carries out; the new VMI starts from the VM's pins.
package restart

import (
	"fmt"
	"slices"
	"strings"

	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
)

// Plan plans eventID's restart of vms (the VMs of object): one plan per VM,
// sorted by namespace and name.
func Plan(l instancetype.Lookup, eventID string, object events.Ref, vms []*virtv1.VirtualMachine) []events.Plan {
	memo := &instancetype.Memo{}
	plans := make([]events.Plan, 0, len(vms))
	for _, vm := range vms {
		plans = append(plans, PlanVM(l, eventID, object, vm, memo))
	}
	slices.SortFunc(plans, func(a, b events.Plan) int {
		return strings.Compare(a.VM.Namespace+"/"+a.VM.Name, b.VM.Namespace+"/"+b.VM.Name)
	})
	return plans
}

// PlanVM plans restarting vm: a restart of its running VMI when KubeVirt
// flagged RestartRequired; none when nothing waits for a restart; a skip,
// saying why, for a VM that opted out (DoNotDisruptAnnotation), whose run
// strategy takes no restart (Halted, Once: virt-api refuses them too),
// that is not running (a stopped VM picks its pin up at its next start),
// or that has a start or stop under way.
func PlanVM(l instancetype.Lookup, eventID string, object events.Ref, vm *virtv1.VirtualMachine, memo *instancetype.Memo) events.Plan {
	plan := events.Plan{EventID: eventID, VM: events.VMRef{Namespace: vm.Namespace, Name: vm.Name, UID: string(vm.UID)},
		Target: events.Target{Move: events.MoveRestart, Object: object}}
	skip := func(format string, args ...any) events.Plan {
		plan.Action, plan.Reason = events.ResultSkip, fmt.Sprintf(format, args...)
		return plan
	}
	vmi := l.VMI(vm.Namespace, vm.Name)
	if why := Refused(vm, vmi); why != "" {
		return skip("%s", why)
	}
	if _, flagged := instancetype.RestartRequired(vm); !flagged {
		plan.Action, plan.Reason = events.ResultNone, "no restart pending: KubeVirt has not set RestartRequired"
		return plan
	}
	changes, err := instancetype.RestartChanges(l, vm, vmi, memo)
	if err != nil {
		return skip("cannot read what the restart brings: %v", err)
	}
	plan.Action, plan.Changes, plan.Target.VMI = events.ResultRestart, changes, string(vmi.UID)
	plan.Reason = "RestartRequired: restarting starts a new VMI from the VM's pins"
	return plan
}

// Refused says why vm (running vmi, nil when none) is not to be restarted,
// "" when it may be: the checks a restart's plan makes, and the applier
// makes again on the VM as it finds it.
func Refused(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) string {
	if v := vm.Annotations[events.DoNotDisruptAnnotation]; v == "true" {
		return "opted out: annotation " + events.DoNotDisruptAnnotation + "=true"
	}
	strategy, err := vm.RunStrategy()
	switch {
	case err != nil:
		return "its run strategy is unreadable: " + err.Error()
	case strategy == virtv1.RunStrategyHalted || strategy == virtv1.RunStrategyOnce:
		return fmt.Sprintf("run strategy %s: KubeVirt takes no restart of it", strategy)
	case !instancetype.Running(vmi):
		return "not running: a stopped VM picks its pin up at its next start"
	case len(vm.Status.StateChangeRequests) > 0:
		return "a start or stop is already under way (status.stateChangeRequests)"
	}
	for _, ref := range vmi.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.UID != vm.UID {
			return "its VMI belongs to another VM"
		}
	}
	return ""
}
