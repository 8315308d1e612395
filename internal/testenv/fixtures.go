package testenv

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/instancetype"
	"kvlive/internal/kube"
)

// Fixture builders for the objects kvlive's tests write out again and
// again. Each object gets the UID "uid-<name>" (VMs: "uid-<name>") and
// generation 1; mutate what a test is about.

// InstancetypeSpec is an instance type spec of vcpus and mem ("4Gi").
func InstancetypeSpec(vcpus uint32, mem string) v1beta1.VirtualMachineInstancetypeSpec {
	return v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: vcpus}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse(mem)}}
}

// ClusterInstancetype is a VirtualMachineClusterInstancetype at generation 1.
func ClusterInstancetype(name string, vcpus uint32, mem string) *v1beta1.VirtualMachineClusterInstancetype {
	return &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       InstancetypeSpec(vcpus, mem),
	}
}

// Instancetype is a namespaced VirtualMachineInstancetype at generation 1.
func Instancetype(namespace, name string, vcpus uint32, mem string) *v1beta1.VirtualMachineInstancetype {
	return &v1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       InstancetypeSpec(vcpus, mem),
	}
}

// ClusterPreference is a VirtualMachineClusterPreference at generation 1
// preferring topology.
func ClusterPreference(name string, topology v1beta1.PreferredCPUTopology) *v1beta1.VirtualMachineClusterPreference {
	return &v1beta1.VirtualMachineClusterPreference{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       v1beta1.VirtualMachinePreferenceSpec{CPU: &v1beta1.CPUPreferences{PreferredCPUTopology: &topology}},
	}
}

// VM is a stopped amd64 VM referencing the cluster instance type
// instancetype (none when empty), not pinned yet.
func VM(namespace, name, instancetype string) *virtv1.VirtualMachine {
	halted := virtv1.RunStrategyHalted
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + name)},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &halted,
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"}}},
	}
	if instancetype != "" {
		vm.Spec.Instancetype = &virtv1.InstancetypeMatcher{Name: instancetype}
	}
	return vm
}

// Pin snapshots obj for vm as KubeVirt would and pins vm's status to it
// (its preference pin when obj is a preference). It returns the revision.
func Pin(t testing.TB, vm *virtv1.VirtualMachine, obj runtime.Object) *appsv1.ControllerRevision {
	t.Helper()
	rev, err := instancetype.NewRevision(vm, obj)
	if err != nil {
		t.Fatal(err)
	}
	m := obj.(metav1.Object)
	ref := &virtv1.InstancetypeStatusRef{Name: m.GetName(), ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: rev.Name}}
	switch obj.(type) {
	case *v1beta1.VirtualMachinePreference, *v1beta1.VirtualMachineClusterPreference:
		vm.Status.PreferenceRef = ref
	default:
		vm.Status.InstancetypeRef = ref
	}
	return rev
}

// StartCache runs an informer cache over clients until the test ends.
func StartCache(t testing.TB, clients kube.Clients) *kube.Cache {
	t.Helper()
	c, stop, err := kube.StartCache(context.Background(), clients, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c
}

// StartWholeCache runs a cache of whole, typed objects (kube.NewWholeCache,
// what the virt-controller stand-in reads) over clients until the test
// ends.
func StartWholeCache(t testing.TB, clients kube.Clients) *kube.Cache {
	t.Helper()
	c, err := kube.NewWholeCache(clients, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.Shutdown() })
	c.Start(ctx)
	if err := c.WaitForSync(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	return c
}

// Eventually waits up to timeout for cond, polling, and fails the test
// saying what it waited for.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
