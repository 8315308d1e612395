package kube_test

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// TestTrimUnreadSharesWhatObjectsRepeat: revisions of one generation share
// one snapshot and one label map in the cache, VMs with equal labels one
// map; objects that differ keep their own.
func TestTrimUnreadSharesWhatObjectsRepeat(t *testing.T) {
	rev := func(name, data string) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"instancetype.kubevirt.io/object-name": "u1.medium", "instancetype.kubevirt.io/object-generation": "2"}},
			Data:       runtime.RawExtension{Raw: []byte(data)},
		}
	}
	trim := func(obj any) any {
		out, err := kube.TrimUnread(obj)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := kube.RevisionOf(trim(rev("vm-a-u1.medium-2", `{"spec":{"cpu":{"guest":2}}}`)))
	b := kube.RevisionOf(trim(rev("vm-b-u1.medium-2", `{"spec":{"cpu":{"guest":2}}}`)))
	c := kube.RevisionOf(trim(rev("vm-c-u1.medium-3", `{"spec":{"cpu":{"guest":3}}}`)))
	if &a.Data.Raw[0] != &b.Data.Raw[0] || reflect.ValueOf(a.Labels).UnsafePointer() != reflect.ValueOf(b.Labels).UnsafePointer() {
		t.Error("two revisions of one generation hold a snapshot or labels each")
	}
	if &a.Data.Raw[0] == &c.Data.Raw[0] || string(c.Data.Raw) != `{"spec":{"cpu":{"guest":3}}}` {
		t.Errorf("a revision of another generation shares its snapshot, or lost it: %s", c.Data.Raw)
	}
	vm := func(name, tier string) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"tier": tier}}}
	}
	labelsOf := func(obj any) map[string]string {
		m, err := meta.Accessor(trim(obj)) // a VM is kept in a stored form: its metadata is the VM's
		if err != nil {
			t.Fatal(err)
		}
		return m.GetLabels()
	}
	web1, web2, db := labelsOf(vm("web-1", "web")), labelsOf(vm("web-2", "web")), labelsOf(vm("db-1", "db"))
	if reflect.ValueOf(web1).UnsafePointer() != reflect.ValueOf(web2).UnsafePointer() || db["tier"] != "db" {
		t.Errorf("labels: web-1 %v, web-2 %v, db-1 %v", web1, web2, db)
	}
}
