package standin

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
)

// recordStart stores the VM spec a VMI starts from, as virt-controller's
// createVMRevision does (pkg/virt-controller/watch/vm/vm.go): a
// ControllerRevision revision-start-vm-<vm uid>-<generation>, owned by the
// VM, holding {"spec": ...} with each pin from the VM's status written into
// spec.instancetype/preference.revisionName. It returns the revision's
// name, for vmi.status.virtualMachineRevisionName.
func (c *Controller) recordStart(ctx context.Context, vm *virtv1.VirtualMachine) (string, error) {
	spec := vm.Spec.DeepCopy()
	if m, ref := spec.Instancetype, vm.Status.InstancetypeRef; m != nil && ref != nil && ref.ControllerRevisionRef != nil {
		m.RevisionName = ref.ControllerRevisionRef.Name
	}
	if m, ref := spec.Preference, vm.Status.PreferenceRef; m != nil && ref != nil && ref.ControllerRevisionRef != nil {
		m.RevisionName = ref.ControllerRevisionRef.Name
	}
	data, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return "", err
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("revision-start-vm-%s-%d", vm.UID, vm.Generation),
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: vm.Generation,
	}
	if _, err := c.cfg.Kube.AppsV1().ControllerRevisions(vm.Namespace).Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("standin: start revision of %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return cr.Name, nil
}
