package instancetype

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
)

// Builders for the table: a running amd64 VM on a VMI started from a
// 2-vCPU/4Gi instance type with KubeVirt's defaulted limits (ratio 4).

func it(vcpus uint32, mem string, mutate ...func(*v1beta1.VirtualMachineInstancetypeSpec)) *v1beta1.VirtualMachineInstancetypeSpec {
	s := &v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: vcpus}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse(mem)}}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func pref(topology v1beta1.PreferredCPUTopology, mutate ...func(*v1beta1.VirtualMachinePreferenceSpec)) *v1beta1.VirtualMachinePreferenceSpec {
	p := &v1beta1.VirtualMachinePreferenceSpec{CPU: &v1beta1.CPUPreferences{PreferredCPUTopology: &topology}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// prefWith is a preference with only what mutate sets.
func prefWith(mutate func(*v1beta1.VirtualMachinePreferenceSpec)) *v1beta1.VirtualMachinePreferenceSpec {
	p := &v1beta1.VirtualMachinePreferenceSpec{}
	mutate(p)
	return p
}

func vm(mutate ...func(*virtv1.VirtualMachine)) *virtv1.VirtualMachine {
	v := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns"},
		Spec: virtv1.VirtualMachineSpec{
			Instancetype: &virtv1.InstancetypeMatcher{Name: "u1"},
			Template:     &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"}},
		},
	}
	for _, m := range mutate {
		m(v)
	}
	return v
}

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func vmi(sockets uint32, mem string, mutate ...func(*virtv1.VirtualMachineInstance)) *virtv1.VirtualMachineInstance {
	v := &virtv1.VirtualMachineInstance{
		Spec: virtv1.VirtualMachineInstanceSpec{
			Architecture: "amd64",
			Domain: virtv1.DomainSpec{
				CPU:    &virtv1.CPU{Sockets: sockets, Cores: 1, Threads: 1, MaxSockets: sockets * 4},
				Memory: &virtv1.Memory{Guest: q(mem), MaxGuest: resource.NewQuantity(q(mem).Value()*4, resource.BinarySI)},
			},
		},
		Status: virtv1.VirtualMachineInstanceStatus{
			Phase:      virtv1.Running,
			Conditions: []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: k8scorev1.ConditionTrue}},
			Memory:     &virtv1.MemoryStatus{GuestAtBoot: q(mem), GuestCurrent: q(mem), GuestRequested: q(mem)},
		},
	}
	for _, m := range mutate {
		m(v)
	}
	return v
}

func notMigratable(v *virtv1.VirtualMachineInstance) {
	v.Status.Conditions[0].Status = k8scorev1.ConditionFalse
}

func gen(i *v1beta1.VirtualMachineInstancetypeSpec, p *v1beta1.VirtualMachinePreferenceSpec) Generation {
	return Generation{Instancetype: i, Preference: p}
}

var defaults = ClusterFromKubeVirt(nil)

// decideCase is a row of TestDecide: a VM, its VMI and two generations,
// and what KubeVirt does once the pin moves.
type decideCase struct {
	name string
	// rule names the KubeVirt v1.9.0 code the case follows.
	rule    string
	in      Input
	want    events.Result
	classes map[string]string
	reason  string
}

func decideCases() []decideCase {
	stage := virtv1.VMRolloutStrategyStage
	expand := virtv1.Expand
	return []decideCase{
		{name: "stopped VM waits for its next boot", rule: "vm.go: a VMI is created from the VM spec at start",
			in:   Input{VM: vm(), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "6Gi"), nil), Cluster: defaults},
			want: events.ResultNextBoot, classes: map[string]string{"cpu.sockets": "next-boot", "memory.guest": "next-boot"}},
		{name: "finished VMI counts as stopped", rule: "vm.go: a final VMI is restarted from the VM spec",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi", func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Succeeded }), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil), Cluster: defaults},
			want: events.ResultNextBoot},
		{name: "unchanged spec only moves the pin", rule: "vm.go syncRestartRequired: equal expanded specs",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi"), nil), Cluster: defaults},
			want: events.ResultLive, reason: "only the pin moves"},
		{name: "more sockets within maxSockets go live", rule: "vm.go handleCPUChangeRequest",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil), Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"cpu.sockets": "live"}},
		{name: "sockets beyond maxSockets need a restart", rule: "vm.go handleCPUChangeRequest: Sockets > MaxSockets",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(9, "4Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart"}},
		{name: "fewer sockets need a restart", rule: "vm.go handleCPUChangeRequest: reduction of CPU socket count",
			in:   Input{VM: vm(), VMI: vmi(4, "4Gi"), Pinned: gen(it(4, "4Gi"), nil), Target: gen(it(2, "4Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart"}},
		{name: "arm64 has no CPU hotplug", rule: "vm.go handleCPUChangeRequest: IsARM64",
			in: Input{VM: vm(func(v *virtv1.VirtualMachine) { v.Spec.Template.Spec.Architecture = "arm64" }), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "arm64"},
		{name: "memory up to maxGuest goes live", rule: "vm.go handleMemoryHotplugRequest",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "6Gi"), nil), Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"memory.guest": "live"}},
		{name: "memory on a non-migratable VMI needs a restart", rule: "vm.go handleMemoryHotplugRequest: IsMigratable",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi", notMigratable), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "6Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"memory.guest": "restart"}},
		{name: "CPU is hot-plugged into a non-migratable VMI but reaches the guest only at a restart", rule: "vm.go handleCPUChangeRequest does not check migratability; workload-updater.go migrates only LiveMigratable VMIs",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi", notMigratable), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "6Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart", "memory.guest": "restart"}, reason: "no live migration carries cpu.sockets"},
		{name: "memory without maxGuest needs a restart", rule: "vm.go handleMemoryHotplugRequest: MaxGuest == nil",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi", func(v *virtv1.VirtualMachineInstance) { v.Spec.Domain.Memory.MaxGuest = nil }), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "6Gi"), nil), Cluster: defaults},
			want: events.ResultRestart},
		{name: "memory beyond maxGuest needs a restart", rule: "memory.go ValidateLiveUpdateMemory: Guest > maxGuest",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "32Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "maxGuest"},
		{name: "memory below guestAtBoot needs a restart", rule: "vm.go handleMemoryHotplugRequest: lower than what the VM started with",
			in:   Input{VM: vm(), VMI: vmi(2, "6Gi"), Pinned: gen(it(2, "6Gi"), nil), Target: gen(it(2, "4Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "booted with"},
		{name: "memory down to guestAtBoot goes live", rule: "vm.go handleMemoryHotplugRequest: not below GuestAtBoot",
			in: Input{VM: vm(), VMI: vmi(2, "6Gi", func(v *virtv1.VirtualMachineInstance) { v.Status.Memory.GuestAtBoot = q("4Gi") }),
				Pinned: gen(it(2, "6Gi"), nil), Target: gen(it(2, "4Gi"), nil), Cluster: defaults},
			want: events.ResultLive},
		{name: "memory off the 2Mi alignment needs a restart", rule: "memory.go ValidateLiveUpdateMemory: HotplugBlockAlignmentBytes",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4097Mi"), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "aligned"},
		{name: "1Gi hugepages need 1Gi alignment", rule: "memory.go ValidateLiveUpdateMemory: Hotplug1GHugePagesBlockAlignmentBytes",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi", hugepages("1Gi")), nil), Target: gen(it(2, "4608Mi", hugepages("1Gi")), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "1Gi aligned"},
		{name: "under 1Gi of memory has no hotplug", rule: "memory.go ValidateLiveUpdateMemory: requiredMinGuestMemory",
			in:   Input{VM: vm(), VMI: vmi(2, "512Mi"), Pinned: gen(it(2, "512Mi"), nil), Target: gen(it(2, "768Mi"), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "1Gi"},
		{name: "realtime VMs have no memory hotplug", rule: "memory.go ValidateLiveUpdateMemory: Realtime",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi", realtime), nil), Target: gen(it(2, "6Gi", realtime), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "realtime"},
		{name: "encrypted VMs have no memory hotplug", rule: "memory.go ValidateLiveUpdateMemory: LaunchSecurity",
			in: Input{VM: vm(func(v *virtv1.VirtualMachine) { v.Spec.Template.Spec.Domain.LaunchSecurity = &virtv1.LaunchSecurity{} }), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "6Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "encrypted"},
		{name: "a failed memory hotplug forces a restart", rule: "vm.go handleMemoryHotplugRequest: HotMemoryChange=False",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi", func(v *virtv1.VirtualMachineInstance) {
				v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: k8scorev1.ConditionFalse})
			}), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "6Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, reason: "failed"},
		{name: "a VMI without memory status is not hot-plugged", rule: "vm.go handleMemoryHotplugRequest: GuestCurrent == nil returns early",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi", func(v *virtv1.VirtualMachineInstance) { v.Status.Memory = nil }),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "6Gi"), nil), Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"memory.guest": "next-boot"}},
		{name: "a CPU model change blocks every live change", rule: "vm.go syncRestartRequired: non-live-updatable field",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.CPU.Model = ptr("host-passthrough") }), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart", "cpu.model": "restart"}},
		{name: "dedicated CPUs need a restart", rule: "vm.go syncRestartRequired: dedicatedCpuPlacement",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.CPU.DedicatedCPUPlacement = ptr(true) }), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.dedicatedCPUPlacement": "restart"}},
		{name: "a hugepages change needs a restart", rule: "vm.go syncRestartRequired: memory.hugepages",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", hugepages("2Mi")), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"memory.hugepages": "restart"}},
		{name: "a changed maxSockets needs a restart", rule: "defaults.go setupCPUHotplug: limits are set at boot",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.CPU.MaxSockets = ptr(uint32(16)) }), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.maxSockets": "restart"}},
		{name: "memory under overcommit also moves the memory request, a restart", rule: "apply/memory.go: requests.memory derived from guest and overcommitPercent; syncRestartRequired compares resources",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi", overcommit(25)), nil), Target: gen(it(2, "6Gi", overcommit(25)), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"memory.guest": "restart", "resources.requests.memory": "restart"}},
		{name: "a GPU change needs a restart", rule: "apply/gpu.go; syncRestartRequired: devices.gpus",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) {
				s.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/A100"}}
			}), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"gpus": "restart"}},
		{name: "a host device change needs a restart", rule: "apply/hostdevices.go; syncRestartRequired: devices.hostDevices",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) {
				s.HostDevices = []virtv1.HostDevice{{Name: "nic", DeviceName: "intel.com/sriov"}}
			}), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"hostDevices": "restart"}},
		{name: "a scheduler name change needs a restart", rule: "apply/scheduler.go; syncRestartRequired: schedulerName",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.SchedulerName = "numa-aware" }), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"schedulerName": "restart"}},
		{name: "an IO threads policy change needs a restart", rule: "apply/iothreadpolicy.go; syncRestartRequired: domain.ioThreadsPolicy",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) {
				p := virtv1.IOThreadsPolicyShared
				s.IOThreadsPolicy = &p
			}), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"ioThreadsPolicy": "restart"}},
		{name: "a launch security change needs a restart", rule: "apply/launchsecurity.go; syncRestartRequired: domain.launchSecurity",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) {
				s.LaunchSecurity = &virtv1.LaunchSecurity{SEV: &virtv1.SEV{}}
			}), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"launchSecurity.sev": "restart"}},
		{name: "a NUMA change needs a restart", rule: "apply/cpu.go: cpu.numa; syncRestartRequired",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) {
				s.CPU.NUMA = &virtv1.NUMA{GuestMappingPassthrough: &virtv1.NUMAGuestMappingPassthrough{}}
			}), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.numa": "restart"}},
		{name: "an isolated emulator thread needs a restart", rule: "apply/cpu.go: cpu.isolateEmulatorThread; syncRestartRequired",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.CPU.IsolateEmulatorThread = ptr(true) }), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.isolateEmulatorThread": "restart"}},
		{name: "a realtime change needs a restart", rule: "apply/cpu.go: cpu.realtime; syncRestartRequired",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", realtime), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.realtime": "restart"}},
		{name: "a changed maxGuest needs a restart", rule: "apply/memory.go: memory.maxGuest is set at boot",
			in:   Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.Memory.MaxGuest = q("32Gi") }), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"memory.maxGuest": "restart"}},
		{name: "a nodeSelector change goes live", rule: "vm.go syncRestartRequired: NodeSelector is live-updatable",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.NodeSelector = map[string]string{"zone": "a"} }), nil), Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"nodeSelector": "live"}},
		{name: "instance type annotations wait for the next boot", rule: "apply/vmi.go applies annotations to VMI metadata; syncRestartRequired compares the spec only",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.Annotations = map[string]string{"a": "b"} }), nil), Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"annotations": "next-boot"}},
		{name: "an existing RestartRequired from a hotplug handler does not hold a later change", rule: "vm.go syncRestartRequired: recomputed against the start spec each sync, cleared when only live fields differ",
			in: Input{VM: vm(withRestartRequired), VMI: vmi(2, "4Gi", notMigratable), Pinned: gen(it(2, "6Gi"), nil), Target: gen(it(3, "6Gi"), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart"}, reason: "memory"},
		{name: "an existing RestartRequired clears when the change brings the VM back to what it started with", rule: "vm.go syncRestartRequired: removes the condition when nothing non-live differs; the hotplug handlers then run",
			in: Input{VM: vm(withRestartRequired), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi", model("host-passthrough")), nil), Target: gen(it(3, "4Gi"), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"cpu.model": "live", "cpu.sockets": "live"}},
		{name: "an undone non-live change clears RestartRequired also when virt-controller persisted a firmware UUID after start", rule: "vm.go syncRestartRequired: the firmware UUID synchronizer's write does not count; firmware.go adds it to a VM started without firmware",
			in: Input{VM: vm(withRestartRequired, func(v *virtv1.VirtualMachine) { v.Spec.Template.Spec.Domain.Firmware = &virtv1.Firmware{UUID: "u"} }), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi", model("host-passthrough")), nil), Target: gen(it(2, "4Gi"), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"cpu.model": "live"}},
		{name: "an undone non-live change clears RestartRequired", rule: "vm.go syncRestartRequired: removes the condition when nothing non-live differs from the start spec",
			in: Input{VM: vm(withRestartRequired), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi", model("host-passthrough")), nil), Target: gen(it(2, "4Gi"), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"cpu.model": "live"}},
		{name: "a RestartRequired for sockets beyond maxSockets holds no memory hotplug", rule: "vm.go sync: the CPU handler's RestartRequired is set on the copy the memory handler then reads",
			in: Input{VM: vm(withRestartRequired), VMI: vmi(2, "4Gi"), Pinned: gen(it(9, "4Gi"), nil), Target: gen(it(9, "6Gi"), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart", "memory.guest": "live"}, reason: "maxSockets"},
		{name: "sockets beyond maxSockets undone clear RestartRequired", rule: "vm.go syncRestartRequired clears it; handleCPUChangeRequest finds the VMI's sockets",
			in: Input{VM: vm(withRestartRequired), VMI: vmi(2, "6Gi"), Pinned: gen(it(9, "6Gi"), nil), Target: gen(it(2, "6Gi"), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultLive, reason: "only the pin moves"},
		{name: "an existing RestartRequired holds while the VMI's start differs for good", rule: "vm.go syncRestartRequired: a non-live field still differs from the start spec",
			in: Input{VM: vm(withRestartRequired), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi", model("host-passthrough")), nil), Target: gen(it(3, "4Gi", model("host-passthrough")), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart"}, reason: "cpu.model differs from what the VMI started with"},
		{name: "an existing RestartRequired holds while the VM template changed since start", rule: "vm.go syncRestartRequired: compares the whole template spec",
			in: Input{VM: vm(withRestartRequired, func(v *virtv1.VirtualMachine) { v.Spec.Template.Spec.Hostname = "renamed" }), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil),
				Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}, Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart"}, reason: "template changed"},
		{name: "an existing RestartRequired with an unreadable start holds every live change", rule: "kvlive: no claim beyond what was checked",
			in:   Input{VM: vm(withRestartRequired), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "6Gi"), nil), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.sockets": "restart", "memory.guest": "restart"}, reason: "could not read what its VMI started from"},
		{name: "Stage rollout restarts everything", rule: "virt-config IsVMRolloutStrategyLiveUpdate",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil),
				Cluster: ClusterFromKubeVirt(&virtv1.KubeVirt{Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{VMRolloutStrategy: &stage}}})},
			want: events.ResultRestart, reason: "Stage"},
		{name: "without LiveMigrate hotplug does not reach the guest", rule: "workload-updater: LiveMigrate in workloadUpdateMethods",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil),
				Cluster: ClusterFromKubeVirt(&virtv1.KubeVirt{})},
			want: events.ResultRestart, reason: "LiveMigrate"},
		{name: "expand reference policy is out of scope", rule: "instancetype referencePolicy expand (pkg/instancetype/expand)",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil),
				Cluster: ClusterFromKubeVirt(&virtv1.KubeVirt{Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{Instancetype: &virtv1.InstancetypeConfiguration{ReferencePolicy: &expand}}}})},
			want: events.ResultSkip, reason: "expand"},
		{name: "preferCores turns vCPUs into cores, a restart", rule: "apply/cpu.go applyGuestCPUTopology: Cores",
			in:   Input{VM: vm(), VMI: vmi(1, "4Gi"), Pinned: gen(it(2, "4Gi"), pref(v1beta1.Cores)), Target: gen(it(4, "4Gi"), pref(v1beta1.Cores)), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.cores": "restart"}},
		{name: "preferThreads turns vCPUs into threads, a restart", rule: "apply/cpu.go applyGuestCPUTopology: Threads",
			in:   Input{VM: vm(), VMI: vmi(1, "4Gi"), Pinned: gen(it(2, "4Gi"), pref(v1beta1.Threads)), Target: gen(it(4, "4Gi"), pref(v1beta1.Threads)), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"cpu.threads": "restart"}},
		{name: "spread keeps cores and adds sockets", rule: "apply/cpu.go applyGuestCPUTopology: Spread SocketsCores ratio 2",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi", func(v *virtv1.VirtualMachineInstance) { v.Spec.Domain.CPU.Cores = 2 }),
				Pinned: gen(it(4, "4Gi"), pref(v1beta1.Spread)), Target: gen(it(8, "4Gi"), pref(v1beta1.Spread)), Cluster: defaults},
			want: events.ResultLive, classes: map[string]string{"cpu.sockets": "live"}},
		{name: "a preference topology change needs a restart", rule: "apply/cpu.go applyGuestCPUTopology via preference",
			in:   Input{VM: vm(), VMI: vmi(4, "4Gi"), Pinned: gen(it(4, "4Gi"), pref(v1beta1.Sockets)), Target: gen(it(4, "4Gi"), pref(v1beta1.Cores)), Cluster: defaults},
			want: events.ResultRestart},
		{name: "a preferred machine type change needs a restart", rule: "preference/apply/machine.go; vm.go syncRestartRequired",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), pref(v1beta1.Sockets)),
				Target: gen(it(2, "4Gi"), pref(v1beta1.Sockets, func(p *v1beta1.VirtualMachinePreferenceSpec) {
					p.Machine = &v1beta1.MachinePreferences{PreferredMachineType: "q35"}
				})), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"domain.machine.type": "restart"}},
		{name: "a preferred machine type does nothing where the VM sets its own", rule: "preference/apply/machine.go: only where Machine.Type is empty; virt-api sets it on every VM",
			in: Input{VM: vm(func(v *virtv1.VirtualMachine) { v.Spec.Template.Spec.Domain.Machine = &virtv1.Machine{Type: "q35"} }), VMI: vmi(2, "4Gi"),
				Pinned: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
					p.Machine = &v1beta1.MachinePreferences{PreferredMachineType: "pc-q35-rhel9.6.0"}
				})),
				Target: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
					p.Machine = &v1beta1.MachinePreferences{PreferredMachineType: "q35"}
				})), Cluster: defaults},
			want: events.ResultLive, reason: "only the pin moves"},
		{name: "a preferred architecture does nothing where the VM sets its own", rule: "preference/apply/architecture.go: only where Architecture is empty",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) { p.PreferredArchitecture = ptr("arm64") })),
				Target: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) { p.PreferredArchitecture = ptr("s390x") })), Cluster: defaults},
			want: events.ResultLive, reason: "only the pin moves"},
		{name: "a preferred grace period reaches a VM that sets none", rule: "preference/apply/termination.go",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil),
				Target: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
					p.PreferredTerminationGracePeriodSeconds = ptr(int64(30))
				})), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"terminationGracePeriodSeconds": "restart"}},
		{name: "a preferred disk bus reaches only the disks without one", rule: "preference/apply/disk.go: per disk, only where Bus is empty",
			in: Input{VM: vm(func(v *virtv1.VirtualMachine) {
				v.Spec.Template.Spec.Domain.Devices.Disks = []virtv1.Disk{
					{Name: "root", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSATA}}}, {Name: "data"}}
			}), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
				p.Devices = &v1beta1.DevicePreferences{PreferredDiskBus: virtv1.DiskBusSATA}
			})), Target: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
				p.Devices = &v1beta1.DevicePreferences{PreferredDiskBus: virtv1.DiskBusVirtio}
			})), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"domain.devices.disks[1].disk.bus": "restart", "domain.devices.disks[0].disk.bus": ""}},
		{name: "preferred ACPI overrides the VM's", rule: "preference/apply/features.go: PreferredAcpi is applied unconditionally",
			in: Input{VM: vm(func(v *virtv1.VirtualMachine) {
				v.Spec.Template.Spec.Domain.Features = &virtv1.Features{ACPI: virtv1.FeatureState{Enabled: ptr(true)}}
			}), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
				p.Features = &v1beta1.FeaturePreferences{PreferredAcpi: &virtv1.FeatureState{Enabled: ptr(false)}}
			})), Cluster: defaults},
			want: events.ResultRestart, classes: map[string]string{"domain.features.acpi.enabled": "restart"}},
		{name: "a preferred Hyper-V enlightenment does nothing where the VM sets it", rule: "preference/apply/features.go: per enlightenment, only where nil",
			in: Input{VM: vm(func(v *virtv1.VirtualMachine) {
				v.Spec.Template.Spec.Domain.Features = &virtv1.Features{Hyperv: &virtv1.FeatureHyperv{Relaxed: &virtv1.FeatureState{Enabled: ptr(true)}}}
			}), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
				p.Features = &v1beta1.FeaturePreferences{PreferredHyperv: &virtv1.FeatureHyperv{Relaxed: &virtv1.FeatureState{Enabled: ptr(true)}}}
			})), Target: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
				p.Features = &v1beta1.FeaturePreferences{PreferredHyperv: &virtv1.FeatureHyperv{Relaxed: &virtv1.FeatureState{Enabled: ptr(false)}}}
			})), Cluster: defaults},
			want: events.ResultLive, reason: "only the pin moves"},
		{name: "preference requirements never reach the VM", rule: "preference requirements are checked by virt-api, not applied (preference/apply/vmi.go)",
			in: Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(2, "4Gi"), prefWith(func(p *v1beta1.VirtualMachinePreferenceSpec) {
				p.Requirements = &v1beta1.PreferenceRequirements{CPU: &v1beta1.CPUPreferenceRequirement{Guest: 2}}
			})), Cluster: defaults},
			want: events.ResultLive, reason: "only the pin moves"},
	}
}

func TestDecide(t *testing.T) {
	for _, tt := range decideCases() {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Action != tt.want {
				t.Fatalf("action = %s (%s), want %s [rule: %s]", d.Action, d.Reason, tt.want, tt.rule)
			}
			got := map[string]string{}
			for _, c := range d.Changes {
				got[c.Field] = c.Class
			}
			for f, class := range tt.classes {
				if got[f] != class {
					t.Errorf("%s class = %q, want %q (changes %+v) [rule: %s]", f, got[f], class, d.Changes, tt.rule)
				}
			}
			if !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("reason %q lacks %q [rule: %s]", d.Reason, tt.reason, tt.rule)
			}
		})
	}
}

func TestTopology(t *testing.T) {
	across := func(a v1beta1.SpreadAcross, ratio uint32) func(*v1beta1.VirtualMachinePreferenceSpec) {
		return func(p *v1beta1.VirtualMachinePreferenceSpec) {
			p.CPU.SpreadOptions = &v1beta1.SpreadOptions{Across: &a, Ratio: &ratio}
		}
	}
	tests := []struct {
		vcpus     uint32
		pref      *v1beta1.VirtualMachinePreferenceSpec
		s, c, thr uint32
	}{
		{1, pref(v1beta1.Cores), 1, 1, 1},
		{4, nil, 4, 1, 1},
		{4, pref(v1beta1.Any), 4, 1, 1},
		{4, pref(v1beta1.Cores), 1, 4, 1},
		{4, pref(v1beta1.Threads), 1, 1, 4},
		{8, pref(v1beta1.Spread), 4, 2, 1},
		{12, pref(v1beta1.Spread, across(v1beta1.SpreadAcrossSocketsCores, 3)), 4, 3, 1},
		{8, pref(v1beta1.Spread, across(v1beta1.SpreadAcrossCoresThreads, 2)), 1, 4, 2},
		{16, pref(v1beta1.Spread, across(v1beta1.SpreadAcrossSocketsCoresThreads, 2)), 4, 2, 2},
		{6, pref(v1beta1.DeprecatedPreferCores), 1, 6, 1},
	}
	for _, tt := range tests {
		s, c, thr := topology(tt.vcpus, tt.pref)
		if s != tt.s || c != tt.c || thr != tt.thr {
			t.Errorf("topology(%d, %v) = %d/%d/%d, want %d/%d/%d", tt.vcpus, tt.pref, s, c, thr, tt.s, tt.c, tt.thr)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func hugepages(size string) func(*v1beta1.VirtualMachineInstancetypeSpec) {
	return func(s *v1beta1.VirtualMachineInstancetypeSpec) {
		s.Memory.Hugepages = &virtv1.Hugepages{PageSize: size}
	}
}

func realtime(s *v1beta1.VirtualMachineInstancetypeSpec) { s.CPU.Realtime = &virtv1.Realtime{} }

func overcommit(pct int) func(*v1beta1.VirtualMachineInstancetypeSpec) {
	return func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.Memory.OvercommitPercent = pct }
}

func model(m string) func(*v1beta1.VirtualMachineInstancetypeSpec) {
	return func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.CPU.Model = &m }
}

func withRestartRequired(v *virtv1.VirtualMachine) {
	v.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: k8scorev1.ConditionTrue}}
}

// TestDecideByMigration predicts every combination of change (sockets,
// memory, both), migratability and workloadUpdateMethods as KubeVirt v1.9.0
// treats it: virt-controller hot-plugs sockets into any VMI's spec and
// memory only into a migratable one's (else RestartRequired); the workload
// updater then live-migrates a migratable VMI when the methods hold
// LiveMigrate, else evicts it when they hold Evict, else leaves the change
// for the next boot without RestartRequired.
func TestDecideByMigration(t *testing.T) {
	changes := map[string]struct {
		from, to *v1beta1.VirtualMachineInstancetypeSpec
		fields   []string
	}{
		"sockets": {it(2, "4Gi"), it(3, "4Gi"), []string{"cpu.sockets"}},
		"memory":  {it(2, "4Gi"), it(2, "6Gi"), []string{"memory.guest"}},
		"both":    {it(2, "4Gi"), it(3, "6Gi"), []string{"cpu.sockets", "memory.guest"}},
	}
	methods := map[string][]virtv1.WorkloadUpdateMethod{
		"LiveMigrate": {virtv1.WorkloadUpdateMethodLiveMigrate},
		"Evict":       {virtv1.WorkloadUpdateMethodEvict},
		"both":        {virtv1.WorkloadUpdateMethodLiveMigrate, virtv1.WorkloadUpdateMethodEvict},
		"neither":     nil,
	}
	for change, c := range changes {
		for _, migratable := range []bool{true, false} {
			for method, ms := range methods {
				cluster := ClusterFromKubeVirt(&virtv1.KubeVirt{Spec: virtv1.KubeVirtSpec{WorkloadUpdateStrategy: virtv1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: ms}}})
				want, class := expectedByMigration(change, migratable, cluster)
				name := fmt.Sprintf("%s, migratable %v, %s", change, migratable, method)
				var opts []func(*virtv1.VirtualMachineInstance)
				if !migratable {
					opts = append(opts, notMigratable)
				}
				d := Decide(Input{VM: vm(), VMI: vmi(2, "4Gi", opts...), Pinned: gen(c.from, nil), Target: gen(c.to, nil), Cluster: cluster})
				if d.Action != want {
					t.Errorf("%s: %s (%s), want %s", name, d.Action, d.Reason, want)
				}
				for _, ch := range d.Changes {
					if slices.Contains(c.fields, ch.Field) && ch.Class != class[ch.Field] {
						t.Errorf("%s: %s class %s, want %s", name, ch.Field, ch.Class, class[ch.Field])
					}
				}
			}
		}
	}
}

// expectedByMigration is the rule TestDecideByMigration checks, written
// from KubeVirt's code paths one by one.
func expectedByMigration(change string, migratable bool, c Cluster) (events.Result, map[string]string) {
	class := map[string]string{}
	sockets, memory := change != "memory", change != "sockets"
	restartRequired := false
	if memory && !migratable {
		class["memory.guest"], restartRequired = ClassRestart, true // handleMemoryHotplugRequest
	}
	hot := sockets || (memory && migratable)
	carried := migratable && c.LiveMigrate
	for f, on := range map[string]bool{"cpu.sockets": sockets, "memory.guest": memory && migratable} {
		if !on {
			continue
		}
		if carried {
			class[f] = ClassLive
		} else {
			class[f] = ClassRestart
		}
	}
	switch {
	case hot && !carried && c.Evict:
		return events.ResultEvict, class
	case restartRequired || (hot && !carried):
		return events.ResultRestart, class
	}
	return events.ResultLive, class
}
