package instancetype

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

func TestLimitsAtBoot(t *testing.T) {
	four, eight := uint32(4), uint32(8)
	withCluster := func(mutate func(*Cluster)) Cluster {
		c := ClusterFromKubeVirt(nil)
		mutate(&c)
		return c
	}
	tests := []struct {
		name, rule   string
		vm           *virtv1.VirtualMachine
		it           *v1beta1.VirtualMachineInstancetypeSpec
		pref         *v1beta1.VirtualMachinePreferenceSpec
		cluster      Cluster
		wantSockets  uint32
		wantMaxGuest string
	}{
		{name: "ratio default", rule: "defaults.go setupCPUHotplug/setupMemoryHotplug: × maxHotplugRatio",
			vm: vm(), it: it(2, "4Gi"), cluster: defaults, wantSockets: 8, wantMaxGuest: "16Gi"},
		{name: "instance type maxSockets and maxGuest win", rule: "apply/cpu.go, apply/memory.go copy them onto the VMI",
			vm: vm(), it: it(2, "4Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) {
				s.CPU.MaxSockets = &four
				s.Memory.MaxGuest = q("6Gi")
			}),
			cluster: defaults, wantSockets: 4, wantMaxGuest: "6Gi"},
		{name: "VM template limits without an instance type", rule: "defaults.go: the VMI spec's own maxSockets and maxGuest",
			vm: vm(func(v *virtv1.VirtualMachine) {
				v.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Sockets: 2, Cores: 1, Threads: 1, MaxSockets: 6}
				v.Spec.Template.Spec.Domain.Memory = &virtv1.Memory{Guest: q("2Gi"), MaxGuest: q("4Gi")}
			}), cluster: defaults, wantSockets: 6, wantMaxGuest: "4Gi"},
		{name: "cluster maxCpuSockets and maxGuest", rule: "defaults.go: liveUpdateConfiguration.maxCpuSockets / maxGuest",
			vm: vm(), it: it(2, "4Gi"), cluster: withCluster(func(c *Cluster) { c.MaxCPUSockets = &eight; c.MaxGuest = q("32Gi") }),
			wantSockets: 8, wantMaxGuest: "32Gi"},
		{name: "cluster maxCpuSockets below the sockets is raised", rule: "defaults.go setupCPUHotplug: Sockets > maxSockets",
			vm: vm(), it: it(6, "4Gi"), cluster: withCluster(func(c *Cluster) { c.MaxCPUSockets = &four }), wantSockets: 6, wantMaxGuest: "16Gi"},
		{name: "a custom ratio", rule: "liveUpdateConfiguration.maxHotplugRatio",
			vm: vm(), it: it(2, "4Gi"), cluster: withCluster(func(c *Cluster) { c.MaxHotplugRatio = 2 }), wantSockets: 4, wantMaxGuest: "8Gi"},
		{name: "under the 512 vCPU cap the ratio stands", rule: "defaults.go setupCPUHotplug: maxVCPUs = 512",
			vm: vm(), it: it(64, "4Gi"), pref: pref(v1beta1.Spread), cluster: defaults, wantSockets: 128, wantMaxGuest: "16Gi"},
		{name: "512 vCPU cap", rule: "defaults.go setupCPUHotplug: maxVCPUs / (cores × threads)",
			vm: vm(), it: it(200, "4Gi"), pref: pref(v1beta1.Spread, func(p *v1beta1.VirtualMachinePreferenceSpec) {
				r := uint32(4)
				p.CPU.SpreadOptions = &v1beta1.SpreadOptions{Ratio: &r}
			}), cluster: defaults, wantSockets: 128, wantMaxGuest: "16Gi"},
		{name: "the cap never goes below the sockets", rule: "defaults.go setupCPUHotplug: max(adjustedSockets, Sockets)",
			vm: vm(), it: it(600, "4Gi"), cluster: defaults, wantSockets: 600, wantMaxGuest: "16Gi"},
		{name: "no memory hotplug for small guests", rule: "defaults.go setupMemoryHotplug: ValidateLiveUpdateMemory fails",
			vm: vm(), it: it(2, "512Mi"), cluster: defaults, wantSockets: 8, wantMaxGuest: ""},
		{name: "Stage sets no limits", rule: "defaults.go: only under LiveUpdate",
			vm: vm(), it: it(2, "4Gi"), cluster: withCluster(func(c *Cluster) { c.LiveUpdate = false }), wantSockets: 0, wantMaxGuest: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gen(tt.it, tt.pref)
			in := Input{VM: tt.vm, Pinned: g, Target: g, Cluster: tt.cluster}
			l := limitsAtBoot(in, expand(tt.vm, g, nil))
			got := ""
			if l.MaxGuest != nil {
				got = l.MaxGuest.String()
			}
			if l.MaxSockets != tt.wantSockets || got != tt.wantMaxGuest {
				t.Errorf("limits = %d sockets, maxGuest %q; want %d, %q [rule: %s]", l.MaxSockets, got, tt.wantSockets, tt.wantMaxGuest, tt.rule)
			}
		})
	}
}

func TestNextBootLimitsOnlyFollowDefaults(t *testing.T) {
	in := Input{VM: vm(), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "6Gi"), nil), Cluster: defaults}
	d := Decide(in)
	got := map[string]string{}
	for _, c := range d.Changes {
		got[c.Field] = c.From + "→" + c.To + " " + c.Class
	}
	if got["cpu.maxSockets"] != "8→12 next-boot" || got["memory.maxGuest"] != "16Gi→24Gi next-boot" {
		t.Errorf("changes = %v", got)
	}
	// A hand-set VMI limit is not a default: nothing to report.
	in.VMI.Spec.Domain.CPU.MaxSockets = 16
	in.VMI.Spec.Domain.Memory.MaxGuest = resource.NewQuantity(32<<30, resource.BinarySI)
	for _, c := range Decide(in).Changes {
		if c.Field == "cpu.maxSockets" || c.Field == "memory.maxGuest" {
			t.Errorf("reported %+v for a hand-set limit", c)
		}
	}
}
