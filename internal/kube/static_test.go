package kube_test

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// TestCacheOfObjects: a cache over a file's objects answers what planning
// asks (the VMs referencing an instance type, instancetype revisions, the
// running VMI, the start revision it booted from) without a client.
func TestCacheOfObjects(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.small", 2, "4Gi")
	vm := testenv.VM("ns", "vm-1", it.Name)
	pin := testenv.Pin(t, vm, it)
	other := testenv.VM("ns", "vm-2", "u1.large")
	vmi := testenv.RunningVMI("ns", "vm-1")
	vmi.Status.VirtualMachineRevisionName = "vm-1-start"
	raw, err := json.Marshal(map[string]any{"spec": vm.Spec})
	if err != nil {
		t.Fatal(err)
	}
	start := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm-1-start"}, Data: runtime.RawExtension{Raw: raw}}

	c, err := kube.CacheOf(it, vm, pin, other, vmi, start, &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"}})
	if err != nil {
		t.Fatal(err)
	}
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: it.Name}
	vms, err := c.Referencing(ref, "", labels.Everything())
	if err != nil || len(vms) != 1 || vms[0].Name != "vm-1" {
		t.Fatalf("referencing %s: %v, %v; want vm-1", ref, vms, err)
	}
	if c.Object(ref) == nil || c.KubeVirt() == nil || c.VMI("ns", "vm-1") == nil {
		t.Fatal("the instance type, the KubeVirt CR or the VMI is missing")
	}
	if _, ok := c.Revision("ns", pin.Name); !ok {
		t.Errorf("instancetype revision %s missing", pin.Name)
	}
	if _, ok := c.Revision("ns", start.Name); ok {
		t.Errorf("start revision %s is cached as an instancetype revision (the revision informer selects by label)", start.Name)
	}
	spec, err := c.StartedSpec(vmi)
	if err != nil || spec.Instancetype == nil || spec.Instancetype.Name != it.Name {
		t.Fatalf("started spec: %+v, %v", spec, err)
	}
	vmi.Status.VirtualMachineRevisionName = "gone"
	if _, err := c.StartedSpec(vmi); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("started spec of a missing revision: %v, want not found", err)
	}
	if _, err := kube.CacheOf(&appsv1.Deployment{}); err == nil {
		t.Fatal("a Deployment was cached")
	}
}
