package standin

import (
	"context"
	"encoding/json"
	"fmt"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// hotplugRatio is KubeVirt's default ratio of maxSockets to sockets and of
// maxGuest to guest memory, which virt-api's defaulting gives a new VMI.
const hotplugRatio = 4

// stateChange carries out the first of the VM's status.stateChangeRequests
// as virt-controller does (pkg/virt-controller/watch/vm/vm.go): a Stop
// deletes the VMI it names (any, when it names none) and is removed once
// that VMI is gone; a Start, once no VMI is left, starts a new one from the
// VM's template and pins and is removed. The new VMI runs at once (the
// stand-in plays virt-handler too) and, as its start matches the pins,
// RestartRequired is cleared. It returns whether it acted.
func (c *Controller) stateChange(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (bool, error) {
	if len(vm.Status.StateChangeRequests) == 0 {
		return false, nil
	}
	first := vm.Status.StateChangeRequests[0]
	switch first.Action {
	case virtv1.StopRequest:
		if vmi != nil && (first.UID == nil || *first.UID == vmi.UID) {
			if vmi.DeletionTimestamp != nil {
				return true, nil // its deletion brings the VM back through the queue
			}
			err := c.cfg.Virt.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Delete(ctx, vmi.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &vmi.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return true, fmt.Errorf("standin: stop VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
			}
			return true, nil
		}
		return true, c.dropRequest(ctx, vm)
	case virtv1.StartRequest:
		if vmi != nil {
			return true, nil // the stop has not finished yet
		}
		if err := c.startVMI(ctx, vm); err != nil {
			return true, err
		}
		if hasRestartRequired(vm) {
			if err := c.clearRestartRequired(ctx, vm); err != nil {
				return true, err
			}
		}
		return true, c.dropRequest(ctx, vm)
	}
	return true, c.dropRequest(ctx, vm) // unknown: dropped, as virt-controller does
}

// dropRequest removes the first state change request, testing it is still
// the first (a conflict brings the VM back through the queue).
func (c *Controller) dropRequest(ctx context.Context, vm *virtv1.VirtualMachine) error {
	ops := []map[string]any{
		{"op": "test", "path": "/status/stateChangeRequests/0", "value": vm.Status.StateChangeRequests[0]},
		{"op": "remove", "path": "/status/stateChangeRequests/0"},
	}
	patch, _ := json.Marshal(ops)
	_, err := c.cfg.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("standin: state change request of %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// startVMI creates the VM's VMI from its template and pins, running (the
// phase, conditions and topology virt-handler would report), with the
// start revision and pins the stand-in's live updates compare against.
func (c *Controller) startVMI(ctx context.Context, vm *virtv1.VirtualMachine) error {
	pins := pinnedRevisions(vm)
	it, pref, err := c.loadSpecs(ctx, vm.Namespace, pins)
	if err != nil {
		return err
	}
	start, err := c.recordStart(ctx, vm)
	if err != nil {
		return err
	}
	s := shapeOf(vm, it, pref)
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name: vm.Name, Namespace: vm.Namespace,
			Annotations:     map[string]string{AnnotationBootPins: pins, AnnotationHandledPins: pins},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
		},
		Status: virtv1.VirtualMachineInstanceStatus{
			Phase:                      virtv1.Running,
			VirtualMachineRevisionName: start,
			Conditions: []virtv1.VirtualMachineInstanceCondition{
				{Type: virtv1.VirtualMachineInstanceReady, Status: k8scorev1.ConditionTrue},
				{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: k8scorev1.ConditionTrue},
			},
		},
	}
	if t := vm.Spec.Template; t != nil {
		vmi.Labels = t.ObjectMeta.Labels
		vmi.Spec = *t.Spec.DeepCopy()
	}
	sockets, cores, threads := uint32(s.sockets), uint32(s.cores), uint32(s.threads)
	vmi.Spec.Domain.CPU = &virtv1.CPU{Sockets: sockets, Cores: cores, Threads: threads, MaxSockets: sockets * hotplugRatio}
	vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: sockets, Cores: cores, Threads: threads}
	if g := s.guest; g != nil {
		guest := g.DeepCopy()
		vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: &guest, MaxGuest: resource.NewQuantity(guest.Value()*hotplugRatio, resource.BinarySI)}
		vmi.Status.Memory = &virtv1.MemoryStatus{GuestAtBoot: &guest, GuestCurrent: &guest, GuestRequested: &guest}
	}
	if _, err := c.cfg.Virt.KubevirtV1().VirtualMachineInstances(vm.Namespace).Create(ctx, vmi, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("standin: start VMI %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}
