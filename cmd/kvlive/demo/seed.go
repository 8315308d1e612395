package demo

import (
	"fmt"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
)

// Options size the demo fleet.
type Options struct {
	VMs        int
	Namespaces int
	// RunningPercent of VMs run; every NotMigratableEvery-th running VM is
	// not live-migratable, so memory hotplug needs a restart there.
	RunningPercent     int
	NotMigratableEvery int
}

// DefaultOptions is a fleet of a few hundred VMs over several namespaces.
func DefaultOptions() Options {
	return Options{VMs: 300, Namespaces: 4, RunningPercent: 75, NotMigratableEvery: 8}
}

// The demo's instance types. The edit grows u1.medium; the switch moves
// web-tier u1.small VMs to u1.large.
const (
	EditName     = "u1.medium"
	SwitchFrom   = "u1.small"
	SwitchTo     = "u1.large"
	SwitchSel    = "tier=web"
	teamIT       = "team.standard"
	hotplugRatio = 4
)

// vmShape is how the demo built a VM: what its result must be follows from it.
type vmShape struct {
	namespace, name string
	instancetype    events.Ref
	tier            string
	running         bool
	migratable      bool
	uid             string
}

func clusterIT(name string, uid int, vcpus uint32, mem string) *v1beta1.VirtualMachineClusterInstancetype {
	return &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", uid)), Generation: 1},
		Spec: v1beta1.VirtualMachineInstancetypeSpec{
			CPU:    v1beta1.CPUInstancetype{Guest: vcpus},
			Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse(mem)},
		},
	}
}

// seed builds the fleet's objects. VMs start unpinned: the stand-in pins
// them, as virt-controller would on creation.
func seed(o Options) ([]runtime.Object, []vmShape) {
	objs := []runtime.Object{
		kubeVirtCR(),
		clusterIT(SwitchFrom, 1, 1, "2Gi"),
		clusterIT(EditName, 2, 2, "4Gi"),
		clusterIT(SwitchTo, 3, 4, "8Gi"),
	}
	specs := map[string]v1beta1.VirtualMachineInstancetypeSpec{}
	for _, o := range objs[1:] {
		it := o.(*v1beta1.VirtualMachineClusterInstancetype)
		specs[it.Name] = it.Spec
	}
	specs[teamIT] = objs[2].(*v1beta1.VirtualMachineClusterInstancetype).Spec
	var shapes []vmShape
	for n := range o.Namespaces {
		ns := fmt.Sprintf("team-%d", n+1)
		objs = append(objs, &v1beta1.VirtualMachineInstancetype{
			ObjectMeta: metav1.ObjectMeta{Name: teamIT, Namespace: ns, UID: types.UID(fmt.Sprintf("00000000-0000-4000-9000-%012d", n+1)), Generation: 1},
			Spec:       specs[teamIT],
		})
	}
	for i := range o.VMs {
		s := shapeOf(o, i)
		shapes = append(shapes, s)
		objs = append(objs, newVM(s))
		if s.running {
			objs = append(objs, newVMI(s, specs[s.instancetype.Name]))
		}
	}
	return objs, shapes
}

// kubeVirtCR is the KubeVirt CR of the demo's cluster: LiveUpdate, with
// live migration as the workload update method, deployed (KubeVirt's
// workload updater migrates nothing before).
func kubeVirtCR() *virtv1.KubeVirt {
	strategy := virtv1.VMRolloutStrategyLiveUpdate
	return &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"},
		Spec: virtv1.KubeVirtSpec{
			Configuration: virtv1.KubeVirtConfiguration{
				VMRolloutStrategy:       &strategy,
				LiveUpdateConfiguration: &virtv1.LiveUpdateConfiguration{MaxHotplugRatio: hotplugRatio},
			},
			WorkloadUpdateStrategy: virtv1.KubeVirtWorkloadUpdateStrategy{
				WorkloadUpdateMethods: []virtv1.WorkloadUpdateMethod{virtv1.WorkloadUpdateMethodLiveMigrate},
			},
		},
		Status: virtv1.KubeVirtStatus{Phase: virtv1.KubeVirtPhaseDeployed},
	}
}

// shapeOf is the demo fleet's VM i: 6 of every 20 on the instance type
// the switch moves away from, 3 on their namespace's own, the rest on the
// one the demo edits.
func shapeOf(o Options, i int) vmShape {
	tiers := []string{"web", "db", "batch"}
	s := vmShape{
		namespace:  fmt.Sprintf("team-%d", i%o.Namespaces+1),
		name:       fmt.Sprintf("vm-%04d", i),
		tier:       tiers[i%len(tiers)],
		running:    (i*37)%100 < o.RunningPercent,
		migratable: o.NotMigratableEvery == 0 || i%o.NotMigratableEvery != 5,
		uid:        fmt.Sprintf("0a0a0a0a-0000-4000-8000-%012d", i),
	}
	switch i % 20 {
	case 0, 1, 2, 3, 4, 5:
		s.instancetype = events.Ref{Kind: events.KindClusterInstancetype, Name: SwitchFrom}
	case 6, 7, 8:
		s.instancetype = events.Ref{Kind: events.KindInstancetype, Namespace: s.namespace, Name: teamIT}
	default:
		s.instancetype = events.Ref{Kind: events.KindClusterInstancetype, Name: EditName}
	}
	return s
}

func newVM(s vmShape) *virtv1.VirtualMachine {
	strategy := virtv1.RunStrategyHalted
	if s.running {
		strategy = virtv1.RunStrategyAlways
	}
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.name, Namespace: s.namespace, Generation: 1,
			UID:    types.UID(s.uid),
			Labels: map[string]string{"tier": s.tier},
		},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy:  &strategy,
			Instancetype: &virtv1.InstancetypeMatcher{Kind: s.instancetype.Kind, Name: s.instancetype.Name},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"},
			},
		},
	}
}

// newVMI is a running instance as virt-controller starts it under
// LiveUpdate: hotplug limits defaulted from the ratio (pkg/defaults).
func newVMI(s vmShape, it v1beta1.VirtualMachineInstancetypeSpec) *virtv1.VirtualMachineInstance {
	guest := it.Memory.Guest.DeepCopy()
	maxGuest := resource.NewQuantity(guest.Value()*hotplugRatio, resource.BinarySI)
	migratable := k8scorev1.ConditionTrue
	if !s.migratable {
		migratable = k8scorev1.ConditionFalse
	}
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Architecture: "amd64",
			Domain: virtv1.DomainSpec{
				CPU:    &virtv1.CPU{Sockets: it.CPU.Guest, Cores: 1, Threads: 1, MaxSockets: it.CPU.Guest * hotplugRatio},
				Memory: &virtv1.Memory{Guest: &guest, MaxGuest: maxGuest},
			},
		},
		Status: virtv1.VirtualMachineInstanceStatus{
			Phase: virtv1.Running,
			Conditions: []virtv1.VirtualMachineInstanceCondition{
				{Type: virtv1.VirtualMachineInstanceReady, Status: k8scorev1.ConditionTrue},
				{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: migratable},
			},
			CurrentCPUTopology: &virtv1.CPUTopology{Sockets: it.CPU.Guest, Cores: 1, Threads: 1},
			Memory:             &virtv1.MemoryStatus{GuestAtBoot: &guest, GuestCurrent: &guest, GuestRequested: &guest},
		},
	}
}
