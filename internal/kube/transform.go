package kube

import (
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/instancetype"
)

// StripUnread is the informers' transform: it drops from each object the
// cache keeps what kvlive never reads, its managed fields and kubectl's
// last-applied-configuration annotation, which together are often larger
// than the rest of a VM (hack/bench.sh measures it). Of a VM's managed
// fields it keeps what kvlive does read: who owns, by server-side apply,
// the references and pins it writes (DeclaredOwners). Anything else, a
// tombstone included, passes through unchanged.
func StripUnread(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	var kept []metav1.ManagedFieldsEntry
	if _, vm := obj.(*virtv1.VirtualMachine); vm {
		kept = DeclaredOwners(m.GetManagedFields())
	}
	m.SetManagedFields(kept)
	if ann := m.GetAnnotations(); ann[corev1.LastAppliedConfigAnnotation] != "" {
		kept := make(map[string]string, len(ann)-1)
		for k, v := range ann {
			if k != corev1.LastAppliedConfigAnnotation {
				kept[k] = v
			}
		}
		m.SetAnnotations(kept)
	}
	return obj, nil
}

// ownedRoots are the parts of a VM's managed fields kvlive reads: the
// instance type and preference references and pins it writes.
var ownedRoots = map[string][]string{
	"f:spec":   {"f:instancetype", "f:preference"},
	"f:status": {"f:instancetypeRef", "f:preferenceRef"},
}

// DeclaredOwners keeps, of a VM's managed fields, the server-side apply
// entries (operation Apply) that own part of its instance type or
// preference reference or pin, each cut down to those fields: what
// instancetype.FieldOwners reads, in a few bytes per owner rather than the
// whole field set of every writer.
func DeclaredOwners(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var kept []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var set map[string]json.RawMessage
		if json.Unmarshal(e.FieldsV1.Raw, &set) != nil {
			continue
		}
		cut := map[string]map[string]json.RawMessage{}
		for root, keys := range ownedRoots {
			var fields map[string]json.RawMessage
			if json.Unmarshal(set[root], &fields) != nil {
				continue
			}
			for _, k := range keys {
				if v, ok := fields[k]; ok {
					if cut[root] == nil {
						cut[root] = map[string]json.RawMessage{}
					}
					cut[root][k] = v
				}
			}
		}
		if len(cut) == 0 {
			continue
		}
		raw, err := json.Marshal(cut)
		if err != nil {
			continue
		}
		kept = append(kept, metav1.ManagedFieldsEntry{Manager: e.Manager, Operation: e.Operation, FieldsType: e.FieldsType, FieldsV1: &metav1.FieldsV1{Raw: raw}})
	}
	return kept
}

// TrimUnread is the transform of kvlive's own caches: StripUnread, then
// each VM and VMI cut down to what kvlive reads (instancetype.TrimVM and
// TrimVMI) and kept, with each ControllerRevision of the usual metadata,
// in a stored form (storedVM, storedVMI, storedRevision: a VM's template
// as JSON, a VMI's few fields and a revision's metadata without the
// structs around them),
// so a cache of a large fleet holds little more than the instance type,
// preference and hotplug state of each VM (docs/performance.md measures
// it), sharing equal labels, annotations and revision snapshots among
// objects (intern). The cache's readers rebuild typed objects. A cache
// the virt-controller stand-in reads keeps objects whole and typed
// (NewWholeCache).
func TrimUnread(obj any) (any, error) {
	switch obj.(type) {
	case *storedVM, *storedVMI, *storedRevision:
		return obj, nil // trimmed already: a transform runs again on a relist
	}
	obj, err := StripUnread(obj)
	if err != nil {
		return obj, err
	}
	intern(obj)
	switch o := obj.(type) {
	case *virtv1.VirtualMachineInstance:
		return storeVMI(instancetype.TrimVMI(o)), nil
	case *virtv1.VirtualMachine:
		instancetype.TrimVM(o)
		return storeVM(o)
	case *appsv1.ControllerRevision:
		return storeRevision(o), nil
	}
	return obj, nil
}
