package testenv

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
	"kvlive/internal/kube"
)

// PlanFleet is a planner's cache of cached VMs (half of them running), of
// which referencing use the cluster instance type "hot", pinned to its
// generation 1, and an edit of "hot" to plan: what the planner
// benchmarks plan, in the unit benchmarks and in hack/bench.sh.
type PlanFleet struct {
	Cache       *kube.Cache
	Ref         events.Ref
	Target      instancetype.Target
	Referencing int
}

// NewPlanFleet builds a PlanFleet on fake clientsets.
func NewPlanFleet(tb testing.TB, cached, referencing int) *PlanFleet {
	tb.Helper()
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
				tb.Fatal(err)
			}
			vm.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: it, ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: rev.Name}}
			kubeObjs = append(kubeObjs, rev)
		}
		virtObjs = append(virtObjs, vm)
		if i%2 == 0 {
			virtObjs = append(virtObjs, RunningVMI(ns, name))
		}
	}
	f := StartCache(tb, FakeClients(kubeObjs, virtObjs...))
	spec := hot.Spec.DeepCopy()
	spec.CPU.Guest, spec.Memory.Guest = 3, resource.MustParse("6Gi")
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "hot"}
	return &PlanFleet{
		Cache: f, Ref: ref, Referencing: referencing,
		// As ChangeTarget builds it: memo and cluster configuration per event.
		Target: instancetype.Target{Target: events.Target{Move: events.MoveRepin, Object: ref, UID: "uid-hot", Generation: 2}, Spec: spec, Memo: &instancetype.Memo{}, Cluster: f.Cluster()},
	}
}

// PlanEvent plans the edit for every referencing VM, as the planner stage
// does before publishing, and fails b on a VM planned otherwise than live
// or next-boot.
func (p *PlanFleet) PlanEvent(b *testing.B) {
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		vms, err := p.Cache.Referencing(p.Ref, "", nil)
		if err != nil || len(vms) != p.Referencing {
			b.Fatalf("%d VMs, %v", len(vms), err)
		}
		for _, vm := range vms {
			if pl := instancetype.PlanVM(p.Cache, "ev", p.Target, vm); pl.Action != events.ResultLive && pl.Action != events.ResultNextBoot {
				b.Fatalf("%s: %s %s", vm.Name, pl.Action, pl.Reason)
			}
		}
	}
	b.ReportMetric(float64(p.Referencing*b.N)/b.Elapsed().Seconds(), "VMs/s")
}
