package planner

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/testenv"
)

// BenchmarkPlanEvent plans one event that references 10,000 of 100,000
// cached VMs (half of them running): the index lookup plus one plan per VM,
// as the planner stage does before publishing.
func BenchmarkPlanEvent(b *testing.B) {
	const cached, referencing = 100_000, 10_000
	hot := &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "hot", UID: "uid-hot", Generation: 1},
		Spec:       v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 2}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("4Gi")}},
	}
	var kubeObjs []runtime.Object
	virtObjs := []runtime.Object{hot}
	for i := range cached {
		ns, name := fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("vm-%06d", i)
		it := fmt.Sprintf("cold-%d", i%20)
		if i%(cached/referencing) == 0 {
			it = "hot"
		}
		vm := &virtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
			Spec: virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: it},
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"}}},
		}
		if it == "hot" {
			rev, err := instancetype.NewRevision(vm, hot)
			if err != nil {
				b.Fatal(err)
			}
			vm.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: it, ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: rev.Name}}
			kubeObjs = append(kubeObjs, rev)
		}
		virtObjs = append(virtObjs, vm)
		if i%2 == 0 {
			virtObjs = append(virtObjs, testenv.RunningVMI(ns, name))
		}
	}
	f := testenv.StartCache(b, testenv.FakeClients(kubeObjs, virtObjs...))
	spec := hot.Spec.DeepCopy()
	spec.CPU.Guest, spec.Memory.Guest = 3, resource.MustParse("6Gi")
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "hot"}
	// As ChangeTarget builds it: memo and cluster configuration per event.
	target := instancetype.Target{Target: events.Target{Move: events.MoveRepin, Object: ref, UID: "uid-hot", Generation: 2}, Spec: spec, Memo: &instancetype.Memo{}, Cluster: f.Cluster()}

	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		vms, err := f.Referencing(ref, "", nil)
		if err != nil || len(vms) != referencing {
			b.Fatalf("%d VMs, %v", len(vms), err)
		}
		for _, vm := range vms {
			if p := instancetype.PlanVM(f, "ev", target, vm); p.Action != events.ResultLive && p.Action != events.ResultNextBoot {
				b.Fatalf("%s: %s %s", vm.Name, p.Action, p.Reason)
			}
		}
	}
	b.ReportMetric(float64(referencing*b.N)/b.Elapsed().Seconds(), "VMs/s")
}
