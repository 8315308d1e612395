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

// TestDeclaredOwnersKeepsWhoAppliedTheReference: of a VM's managed fields
// the cache keeps the server-side apply owners of its instance type and
// preference references and pins, cut down to those fields, and nothing
// of writers by update or of applies that own none of them.
func TestDeclaredOwnersKeepsWhoAppliedTheReference(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	got := kube.DeclaredOwners([]metav1.ManagedFieldsEntry{
		entry("argocd-controller", metav1.ManagedFieldsOperationApply,
			`{"f:metadata":{"f:labels":{".":{}}},"f:spec":{"f:instancetype":{"f:name":{}},"f:template":{"f:spec":{}}}}`),
		entry("kubectl-edit", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:instancetype":{"f:name":{}}}}`),
		entry("labeller", metav1.ManagedFieldsOperationApply, `{"f:metadata":{"f:labels":{"f:tier":{}}}}`),
		entry("pinner", metav1.ManagedFieldsOperationApply, `{"f:status":{"f:instancetypeRef":{"f:controllerRevisionRef":{"f:name":{}}}}}`),
	})
	want := map[string]string{
		"argocd-controller": `{"f:spec":{"f:instancetype":{"f:name":{}}}}`,
		"pinner":            `{"f:status":{"f:instancetypeRef":{"f:controllerRevisionRef":{"f:name":{}}}}}`,
	}
	if len(got) != len(want) {
		t.Fatalf("kept %d entries, want %d: %+v", len(got), len(want), got)
	}
	for _, e := range got {
		if string(e.FieldsV1.Raw) != want[e.Manager] {
			t.Errorf("%s: kept %s, want %s", e.Manager, e.FieldsV1.Raw, want[e.Manager])
		}
	}
}
