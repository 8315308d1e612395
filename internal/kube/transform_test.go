package kube_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// TestCacheDropsWhatKvliveNeverReads: the cached VM has no managed fields
// and no last-applied annotation, and keeps its other annotations.
func TestCacheDropsWhatKvliveNeverReads(t *testing.T) {
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{
		Name: "vm", Namespace: "ns", UID: "uid-vm",
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: `{"big":"json"}`, "team": "a"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
	}}
	c := testenv.StartCache(t, testenv.FakeClients(nil, vm))
	got := c.VM("ns", "vm")
	if got == nil {
		t.Fatal("VM not cached")
	}
	if len(got.ManagedFields) != 0 || got.Annotations[corev1.LastAppliedConfigAnnotation] != "" || got.Annotations["team"] != "a" {
		t.Errorf("cached VM: managed fields %v, annotations %v", got.ManagedFields, got.Annotations)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/vm", Obj: vm}
	if out, err := kube.StripUnread(tomb); err != nil || out != any(tomb) {
		t.Errorf("a tombstone: %v, %v", out, err)
	}
}
