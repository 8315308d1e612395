package instancetype

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"kvlive/events"
)

// maxVCPUs is the bound KubeVirt puts on defaulted CPU hotplug
// (pkg/defaults/defaults.go setupCPUHotplug).
const maxVCPUs = 512

// Limits are the hotplug ceilings KubeVirt sets on a VMI when it starts
// under LiveUpdate.
type Limits struct {
	MaxSockets uint32
	// MaxGuest is nil when memory hotplug is unavailable for the VM.
	MaxGuest *resource.Quantity
}

// limitsAtBoot computes the limits a VMI started from v gets, following
// pkg/defaults/defaults.go: setupCPUHotplug (the VM's or instance type's
// maxSockets, else liveUpdateConfiguration.maxCpuSockets raised to the
// sockets, else sockets × maxHotplugRatio capped at 512 vCPUs) and
// setupMemoryHotplug (the VM's or instance type's maxGuest, else
// liveUpdateConfiguration.maxGuest, else guest × maxHotplugRatio, dropped
// when memory hotplug is not supported for the VM).
func limitsAtBoot(in Input, v view) Limits {
	var l Limits
	if !in.Cluster.LiveUpdate {
		return l
	}
	ratio := max(in.Cluster.MaxHotplugRatio, 1)
	l.MaxSockets = v.maxSockets
	if l.MaxSockets == 0 && in.Cluster.MaxCPUSockets != nil {
		l.MaxSockets = *in.Cluster.MaxCPUSockets
		if v.sockets > l.MaxSockets && l.MaxSockets != 0 {
			l.MaxSockets = v.sockets
		}
	}
	if l.MaxSockets == 0 {
		l.MaxSockets = v.sockets * ratio
		if perSocket := max(v.cores, 1) * max(v.threads, 1); l.MaxSockets*perSocket > maxVCPUs {
			l.MaxSockets = max(maxVCPUs/perSocket, v.sockets)
		}
	}
	switch {
	case v.maxGuest != nil:
		l.MaxGuest = v.maxGuest
	case in.Cluster.MaxGuest != nil:
		l.MaxGuest = in.Cluster.MaxGuest
	case v.guest != nil:
		l.MaxGuest = resource.NewQuantity(v.guest.Value()*int64(ratio), resource.BinarySI)
	}
	if l.MaxGuest != nil && v.guest != nil && memoryUnsupported(in, v, l.MaxGuest) != "" {
		l.MaxGuest = nil
	}
	return l
}

// nextBootLimits reports the hotplug ceilings that change at the VM's next
// boot because the target generation defaults them differently, for a VMI
// whose current limits are exactly what its pinned generation defaulted to
// (so the difference comes from the change, not from a hand-set limit).
func nextBootLimits(in Input, from, to view) []events.Change {
	cpu, mem := in.VMI.Spec.Domain.CPU, in.VMI.Spec.Domain.Memory
	was, will := limitsAtBoot(in, from), limitsAtBoot(in, to)
	var out []events.Change
	if cpu != nil && from.maxSockets == to.maxSockets && cpu.MaxSockets == was.MaxSockets && will.MaxSockets != was.MaxSockets {
		out = append(out, events.Change{Field: "cpu.maxSockets", From: u32(was.MaxSockets), To: u32(will.MaxSockets), Class: ClassNextBoot})
	}
	if mem != nil && quantity(from.maxGuest) == quantity(to.maxGuest) && quantity(mem.MaxGuest) == quantity(was.MaxGuest) && quantity(will.MaxGuest) != quantity(was.MaxGuest) {
		out = append(out, events.Change{Field: "memory.maxGuest", From: display(quantity(was.MaxGuest)), To: display(quantity(will.MaxGuest)), Class: ClassNextBoot})
	}
	return out
}
