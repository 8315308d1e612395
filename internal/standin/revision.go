package standin

import (
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
)

// newRevision is the stand-in's own reading of KubeVirt's
// pkg/instancetype/revision/store.go (CreateControllerRevision and
// GenerateName): written apart from kvlive's instancetype.NewRevision on
// purpose, so the demo and the tests check kvlive's revisions against a
// second implementation rather than against themselves. It works on the
// object's JSON, the way the stored data is read back.
func newRevision(vm *virtv1.VirtualMachine, obj runtime.Object) (*appsv1.ControllerRevision, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		return nil, fmt.Errorf("standin: %T has no metadata", obj)
	}
	kind := kindNames[fmt.Sprintf("%T", obj)]
	if kind == "" {
		return nil, fmt.Errorf("standin: cannot snapshot %T", obj)
	}
	name, _ := meta["name"].(string)
	uid, _ := meta["uid"].(string)
	generation, _ := meta["generation"].(float64)
	gen := strconv.FormatInt(int64(generation), 10)
	// KubeVirt keeps the object but not who owns or labels it.
	for _, k := range []string{"labels", "annotations", "finalizers", "ownerReferences", "managedFields"} {
		delete(meta, k)
	}
	doc["apiVersion"], doc["kind"] = "instancetype.kubevirt.io/v1beta1", kind
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            vm.Name + "-" + name + "-v1beta1-" + uid + "-" + gen,
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
			Labels: map[string]string{
				"instancetype.kubevirt.io/object-uid":        uid,
				"instancetype.kubevirt.io/object-name":       name,
				"instancetype.kubevirt.io/object-kind":       kind,
				"instancetype.kubevirt.io/object-version":    "v1beta1",
				"instancetype.kubevirt.io/object-generation": gen,
			},
		},
		Data: runtime.RawExtension{Raw: data},
	}, nil
}

var kindNames = map[string]string{
	"*v1beta1.VirtualMachineInstancetype":        "VirtualMachineInstancetype",
	"*v1beta1.VirtualMachineClusterInstancetype": "VirtualMachineClusterInstancetype",
	"*v1beta1.VirtualMachinePreference":          "VirtualMachinePreference",
	"*v1beta1.VirtualMachineClusterPreference":   "VirtualMachineClusterPreference",
}
