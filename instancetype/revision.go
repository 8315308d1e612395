package instancetype

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"
	"kubevirt.io/api/instancetype/v1beta1"
)

// CreatedByLabel marks the ControllerRevisions kvlive created (value
// CreatedBy), the only ones it ever deletes (pruner). KubeVirt compares
// revisions by their data, so the label changes nothing for it.
const (
	CreatedByLabel = "kvlive.io/created-by"
	CreatedBy      = "kvlive"
)

// SupersedesAnnotation, on a revision kvlive created to move a VM's pin,
// names the revision the pin left for it: what `kvlive rollout undo`
// moves the VM back to, which the revision pruner keeps however old it is.
const SupersedesAnnotation = "kvlive.io/supersedes"

// Kvlives is cr as kvlive creates it: a copy labelled as kvlive's
// (CreatedByLabel: the pruner may delete it once superseded) and, when
// supersedes names one, naming the revision whose pin it takes over
// (SupersedesAnnotation). cr is left as it was.
func Kvlives(cr *appsv1.ControllerRevision, supersedes string) *appsv1.ControllerRevision {
	ours := cr.DeepCopy()
	if ours.Labels == nil {
		ours.Labels = map[string]string{}
	}
	ours.Labels[CreatedByLabel] = CreatedBy
	if supersedes != "" {
		if ours.Annotations == nil {
			ours.Annotations = map[string]string{}
		}
		ours.Annotations[SupersedesAnnotation] = supersedes
	}
	return ours
}

// CreatedByKvlive reports whether kvlive created cr.
func CreatedByKvlive(cr *appsv1.ControllerRevision) bool {
	return cr.Labels[CreatedByLabel] == CreatedBy
}

// RevisionName is KubeVirt's name for a VM's snapshot of one object
// generation (pkg/instancetype/revision/store.go GenerateName).
func RevisionName(vmName string, obj metav1.Object) string {
	return fmt.Sprintf("%s-%s-%s-%s-%d", vmName, obj.GetName(), v1beta1.SchemeGroupVersion.Version, obj.GetUID(), obj.GetGeneration())
}

// NewRevision builds the ControllerRevision KubeVirt would store for vm's
// snapshot of obj: KubeVirt's name and labels, the VM as controller owner,
// and the whole v1beta1 object as data with labels, annotations, finalizers,
// owner references and managed fields stripped
// (pkg/instancetype/revision/store.go CreateControllerRevision).
func NewRevision(vm *virtv1.VirtualMachine, obj runtime.Object) (*appsv1.ControllerRevision, error) {
	obj = obj.DeepCopyObject()
	kind, err := kindOf(obj)
	if err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(v1beta1.SchemeGroupVersion.WithKind(kind))
	m := obj.(metav1.Object)
	m.SetLabels(nil)
	m.SetAnnotations(nil)
	m.SetFinalizers(nil)
	m.SetOwnerReferences(nil)
	m.SetManagedFields(nil)
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("revision data for %s: %w", m.GetName(), err)
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            RevisionName(vm.Name, m),
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
			Labels: map[string]string{
				instancetypeapi.ControllerRevisionObjectGenerationLabel: strconv.FormatInt(m.GetGeneration(), 10),
				instancetypeapi.ControllerRevisionObjectKindLabel:       kind,
				instancetypeapi.ControllerRevisionObjectNameLabel:       m.GetName(),
				instancetypeapi.ControllerRevisionObjectUIDLabel:        string(m.GetUID()),
				instancetypeapi.ControllerRevisionObjectVersionLabel:    v1beta1.SchemeGroupVersion.Version,
			},
		},
		Data: runtime.RawExtension{Raw: raw},
	}, nil
}

// SameSnapshot reports whether two revisions hold the same object spec, so
// finding kvlive's revision already there (a resumed rollout) is not an error.
func SameSnapshot(a, b *appsv1.ControllerRevision) bool {
	ra, err1 := revisionRaw(a.Data)
	rb, err2 := revisionRaw(b.Data)
	if err1 != nil || err2 != nil {
		return false
	}
	var sa, sb snapshot
	if json.Unmarshal(ra, &sa) != nil || json.Unmarshal(rb, &sb) != nil {
		return false
	}
	return sa.APIVersion == sb.APIVersion && sa.Kind == sb.Kind && jsonEqual(sa.Spec, sb.Spec)
}

func jsonEqual(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

func kindOf(obj runtime.Object) (string, error) {
	switch obj.(type) {
	case *v1beta1.VirtualMachineInstancetype:
		return "VirtualMachineInstancetype", nil
	case *v1beta1.VirtualMachineClusterInstancetype:
		return "VirtualMachineClusterInstancetype", nil
	case *v1beta1.VirtualMachinePreference:
		return "VirtualMachinePreference", nil
	case *v1beta1.VirtualMachineClusterPreference:
		return "VirtualMachineClusterPreference", nil
	}
	return "", fmt.Errorf("not an instancetype.kubevirt.io object: %T", obj)
}

// SpecOf returns the spec of an instance type or preference object.
func SpecOf(obj any) (any, bool) {
	switch o := obj.(type) {
	case *v1beta1.VirtualMachineInstancetype:
		return &o.Spec, true
	case *v1beta1.VirtualMachineClusterInstancetype:
		return &o.Spec, true
	case *v1beta1.VirtualMachinePreference:
		return &o.Spec, true
	case *v1beta1.VirtualMachineClusterPreference:
		return &o.Spec, true
	}
	return nil, false
}

// IsSnapshot reports whether cr is an instancetype or preference snapshot,
// the ControllerRevisions the fleet's cache holds (those carrying KubeVirt's
// object-kind label).
func IsSnapshot(cr *appsv1.ControllerRevision) bool {
	_, ok := cr.Labels[instancetypeapi.ControllerRevisionObjectKindLabel]
	return ok
}

// Snapshot is what a revision of obj holds as data: the object with its
// kind and none of the metadata KubeVirt strips (NewRevision), kept in a
// rollout's record so an undo can re-create a revision that is gone.
func Snapshot(vm *virtv1.VirtualMachine, obj runtime.Object) (json.RawMessage, error) {
	cr, err := NewRevision(vm, obj)
	if err != nil {
		return nil, err
	}
	return cr.Data.Raw, nil
}

// RevisionFromSnapshot re-creates vm's revision of the object raw (a
// revision's data) holds: KubeVirt's name, labels and owner, as NewRevision
// builds them.
func RevisionFromSnapshot(vm *virtv1.VirtualMachine, raw json.RawMessage) (*appsv1.ControllerRevision, error) {
	var meta metav1.TypeMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var obj runtime.Object
	switch meta.Kind {
	case "VirtualMachineInstancetype":
		obj = &v1beta1.VirtualMachineInstancetype{}
	case "VirtualMachineClusterInstancetype":
		obj = &v1beta1.VirtualMachineClusterInstancetype{}
	case "VirtualMachinePreference":
		obj = &v1beta1.VirtualMachinePreference{}
	case "VirtualMachineClusterPreference":
		obj = &v1beta1.VirtualMachineClusterPreference{}
	default:
		return nil, fmt.Errorf("snapshot of a %q: not an instancetype.kubevirt.io kind", meta.Kind)
	}
	if meta.APIVersion != v1beta1.SchemeGroupVersion.String() {
		return nil, fmt.Errorf("snapshot holds %q; kvlive re-creates %s", meta.APIVersion, v1beta1.SchemeGroupVersion)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return NewRevision(vm, obj)
}
