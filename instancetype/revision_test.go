package instancetype

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

func TestNewRevisionMatchesKubeVirt(t *testing.T) {
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "vm-uid"}}
	it := &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{
			Name: "u1.large", UID: "it-uid", Generation: 5, ResourceVersion: "77",
			Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x"},
			Finalizers: []string{"f"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 3}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("6Gi")}},
	}
	cr, err := NewRevision(vm, it)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Name != "web-1-u1.large-v1beta1-it-uid-5" || cr.Namespace != "shop" {
		t.Errorf("name = %s/%s", cr.Namespace, cr.Name)
	}
	wantLabels := map[string]string{
		"instancetype.kubevirt.io/object-uid":        "it-uid",
		"instancetype.kubevirt.io/object-generation": "5",
		"instancetype.kubevirt.io/object-name":       "u1.large",
		"instancetype.kubevirt.io/object-kind":       "VirtualMachineClusterInstancetype",
		"instancetype.kubevirt.io/object-version":    "v1beta1",
	}
	for k, v := range wantLabels {
		if cr.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cr.Labels[k], v)
		}
	}
	if len(cr.OwnerReferences) != 1 || cr.OwnerReferences[0].UID != "vm-uid" || cr.OwnerReferences[0].Kind != "VirtualMachine" ||
		cr.OwnerReferences[0].Controller == nil || !*cr.OwnerReferences[0].Controller {
		t.Errorf("owner = %+v", cr.OwnerReferences)
	}
	var data map[string]any
	if err := json.Unmarshal(cr.Data.Raw, &data); err != nil {
		t.Fatal(err)
	}
	meta := data["metadata"].(map[string]any)
	for _, stripped := range []string{"labels", "annotations", "finalizers", "managedFields", "ownerReferences"} {
		if _, ok := meta[stripped]; ok {
			t.Errorf("data keeps metadata.%s", stripped)
		}
	}
	if data["apiVersion"] != "instancetype.kubevirt.io/v1beta1" || data["kind"] != "VirtualMachineClusterInstancetype" || meta["uid"] != "it-uid" {
		t.Errorf("data = %v", data)
	}
	if it.Labels["team"] != "a" {
		t.Error("NewRevision mutated its input")
	}
	spec, err := DecodeRevision(cr, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.(*v1beta1.VirtualMachineInstancetypeSpec); got.CPU.Guest != 3 || got.Memory.Guest.String() != "6Gi" {
		t.Errorf("decoded spec = %+v", got)
	}
	if !SameSnapshot(cr, cr.DeepCopy()) {
		t.Error("SameSnapshot(cr, copy) = false")
	}
	other := it.DeepCopy()
	other.Spec.CPU.Guest = 4
	cr2, _ := NewRevision(vm, other)
	if SameSnapshot(cr, cr2) {
		t.Error("SameSnapshot ignores a spec difference")
	}
}

// TestKvlivesMarksACopy: the revision kvlive creates carries its label
// beside KubeVirt's, and names what it supersedes only when there is one;
// the revision it was made from is left as it was.
func TestKvlivesMarksACopy(t *testing.T) {
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "vm-uid"}}
	it := &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: "u1.medium", UID: "it-uid", Generation: 2}}
	want, err := NewRevision(vm, it)
	if err != nil {
		t.Fatal(err)
	}
	labels := len(want.Labels)
	ours := Kvlives(want, "web-1-u1.medium-it-uid-1")
	if !CreatedByKvlive(ours) || len(ours.Labels) != labels+1 || ours.Annotations[SupersedesAnnotation] != "web-1-u1.medium-it-uid-1" {
		t.Errorf("kvlive's revision: labels %v, annotations %v", ours.Labels, ours.Annotations)
	}
	if CreatedByKvlive(want) || want.Annotations != nil {
		t.Errorf("the revision it was made from changed: labels %v, annotations %v", want.Labels, want.Annotations)
	}
	if restored := Kvlives(want, ""); !CreatedByKvlive(restored) || restored.Annotations != nil {
		t.Errorf("a revision superseding none: annotations %v", restored.Annotations)
	}
}
