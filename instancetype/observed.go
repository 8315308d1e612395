package instancetype

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// What KubeVirt reports on a VM and its VMI once a pin moved, read the way
// its virt-controller and virt-handler write it: RestartRequired on the VM;
// a hotplug asked for (HotVCPUChange/HotMemoryChange on the VMI, the new
// values in the VMI's spec); a hotplug refused for now (a Failure condition
// with HotPlugCPUError/HotPlugMemoryError, which it retries); the hotplug
// done (the conditions gone, the VMI's status at the new values).

// HotplugPending lists the hotplug conditions KubeVirt keeps on a VMI until
// the change reached the guest.
func HotplugPending(vmi *virtv1.VirtualMachineInstance) []string {
	if vmi == nil {
		return nil
	}
	var out []string
	for _, c := range vmi.Status.Conditions {
		if (c.Type == virtv1.VirtualMachineInstanceVCPUChange || c.Type == virtv1.VirtualMachineInstanceMemoryChange) && c.Status == corev1.ConditionTrue {
			out = append(out, string(c.Type))
		}
	}
	return out
}

// VMCondition is the VM's condition of type t, if it has one.
func VMCondition(vm *virtv1.VirtualMachine, t virtv1.VirtualMachineConditionType) (virtv1.VirtualMachineCondition, bool) {
	for _, c := range vm.Status.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return virtv1.VirtualMachineCondition{}, false
}

// RestartRequired is the VM's RestartRequired condition when it is true.
func RestartRequired(vm *virtv1.VirtualMachine) (virtv1.VirtualMachineCondition, bool) {
	c, ok := VMCondition(vm, virtv1.VirtualMachineRestartRequired)
	return c, ok && c.Status == corev1.ConditionTrue
}

// HotplugRefused is the VM's Failure condition when KubeVirt refused a
// hotplug (HotPlugCPUError, HotPlugMemoryError).
func HotplugRefused(vm *virtv1.VirtualMachine) (virtv1.VirtualMachineCondition, bool) {
	c, ok := VMCondition(vm, virtv1.VirtualMachineFailure)
	return c, ok && strings.HasPrefix(c.Reason, "HotPlug")
}

// LiveWant is what a live change expects the VMI to show: the sockets and
// guest memory it moves to (zero and nil for what it does not change).
type LiveWant struct {
	Sockets uint32
	Memory  *resource.Quantity
}

// ExpectLive is what the live changes among changes leave on the VMI.
func ExpectLive(changes []events.Change) LiveWant {
	var w LiveWant
	for _, c := range changes {
		if c.Class != string(events.ResultLive) {
			continue
		}
		switch c.Field {
		case "cpu.sockets":
			if n, err := strconv.ParseUint(c.To, 10, 32); err == nil {
				w.Sockets = uint32(n)
			}
		case "memory.guest":
			if q, err := resource.ParseQuantity(c.To); err == nil {
				w.Memory = &q
			}
		}
	}
	return w
}

// SeenOn reports whether the VMI's spec shows every expected value:
// virt-controller took the change.
func (w LiveWant) SeenOn(vmi *virtv1.VirtualMachineInstance) bool {
	d := vmi.Spec.Domain
	if w.Sockets != 0 && (d.CPU == nil || d.CPU.Sockets != w.Sockets) {
		return false
	}
	if w.Memory != nil && (d.Memory == nil || d.Memory.Guest == nil || !d.Memory.Guest.Equal(*w.Memory)) {
		return false
	}
	return true
}

// Reached reports whether the VMI's status shows the expected values
// running: the current CPU topology and the guest memory requested of the
// guest, which virt-handler moves on a migration's target once the hotplug
// is done (the guest may online the memory later: guestCurrent follows).
// A VMI whose status does not report them counts by its spec.
func (w LiveWant) Reached(vmi *virtv1.VirtualMachineInstance) bool {
	if t := vmi.Status.CurrentCPUTopology; w.Sockets != 0 && t != nil && t.Sockets != w.Sockets {
		return false
	}
	if m := vmi.Status.Memory; w.Memory != nil && m != nil {
		got := m.GuestRequested
		if got == nil {
			got = m.GuestCurrent
		}
		if got != nil && !got.Equal(*w.Memory) {
			return false
		}
	}
	return true
}

// Migratable reports whether the VMI says it can live-migrate
// (LiveMigratable=True), which KubeVirt's workload updater needs to carry
// a hot-plug to the guest.
func Migratable(vmi *virtv1.VirtualMachineInstance) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceIsMigratable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Migration is what a VMI's status.migrationState tells of its latest
// live migration, when that migration began after a time (a move): KubeVirt
// keeps the latest migration's state on the VMI until the next hand-off.
type Migration struct {
	// UID is the VirtualMachineInstanceMigration's; Target its node.
	UID, Target string
	// Running: handed to the target and not ended; Started is when the
	// source started it (nil before).
	Running bool
	Started *time.Time
	// Succeeded: ended on the target, completed and not failed.
	Succeeded bool
	// Failed, with FailureReason: the latest migration failed (KubeVirt
	// starts another while the hot-plug condition stands).
	Failed        bool
	FailureReason string
	// Ended is when it ended, if it did.
	Ended *time.Time
}

// Record is the migration as a verdict keeps it, nil when there was none.
func (m Migration) Record() *events.MigrationRecord {
	if m.UID == "" {
		return nil
	}
	return &events.MigrationRecord{UID: m.UID, Target: m.Target, Started: m.Started, Ended: m.Ended, Failed: m.Failed, FailureReason: m.FailureReason}
}

// MigrationSince reads the VMI's latest migration if it started after
// since (or, running, whatever its start); the zero Migration otherwise.
func MigrationSince(vmi *virtv1.VirtualMachineInstance, since time.Time) Migration {
	s := vmi.Status.MigrationState
	if s == nil || s.MigrationUID == "" {
		return Migration{}
	}
	began := s.StartTimestamp
	if began == nil {
		began = s.TargetNodeDomainReadyTimestamp
	}
	ended := s.EndTimestamp
	m := Migration{UID: string(s.MigrationUID), Target: s.TargetNode}
	switch {
	case !s.Completed && !s.Failed:
		m.Running = true
		if began != nil && !began.Time.Before(since) {
			t := began.Time
			m.Started = &t
		}
		return m
	case ended == nil || ended.Time.Before(since) || (began != nil && began.Time.Before(since)):
		// Ended, or started, before the move: not this move's (virt-controller
		// hot-plugs nothing while a migration runs).
		return Migration{}
	}
	end := ended.Time
	m.Ended = &end
	if began != nil && !began.Time.Before(since) {
		t := began.Time
		m.Started = &t
	}
	switch {
	case s.Failed:
		m.Failed, m.FailureReason = true, s.FailureReason
	default:
		m.Succeeded = true
	}
	return m
}

// failedNote names the latest migration that failed, if it did.
func (m Migration) failedNote() string {
	if !m.Failed {
		return ""
	}
	return "; migration " + m.UID + " failed: " + m.FailureReason
}

// InPlannedState says why a VM is not (yet) where its outcome left it, as
// KubeVirt reports it on vm and vmi (the VM's, nil when it has none), or ""
// when it is: live, the VMI shows the new sockets and memory with no
// hotplug pending or refused; restart, RestartRequired is set; next-boot,
// the pin moved. A VM deleted (vm nil) or re-created since has nothing left
// to check.
func InPlannedState(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) string {
	if vm == nil || string(vm.UID) != o.VM.UID {
		return ""
	}
	if o.Stopped != "" {
		return restartState(o, vm, vmi)
	}
	if o.SwitchedTo != nil && !switchedTo(vm, *o.SwitchedTo) {
		return "the VM does not reference " + o.SwitchedTo.String() + " (yet)"
	}
	switch o.Result {
	case events.ResultLive:
		if c, ok := HotplugRefused(vm); ok {
			return "hotplug refused (" + c.Reason + ")"
		}
		// Set since the move (as Judge reads it): KubeVirt could not take
		// the change live.
		since := metav1.NewTime(o.FinishedAt.Add(-time.Second).Truncate(time.Second))
		if c, ok := RestartRequired(vm); ok && !c.LastTransitionTime.Before(&since) {
			return "KubeVirt set RestartRequired (" + c.Reason + ")"
		}
		if vmi == nil {
			return "no VMI"
		}
		if pending := HotplugPending(vmi); len(pending) > 0 {
			return "hotplug pending (" + strings.Join(pending, ", ") + ")"
		}
		if want := ExpectLive(o.Changes); !want.SeenOn(vmi) || !want.Reached(vmi) {
			return "the VMI does not show the new sockets and memory yet"
		}
	case events.ResultRestart:
		if _, ok := RestartRequired(vm); !ok {
			return "RestartRequired not set"
		}
	case events.ResultNextBoot:
		if o.Revision == "" {
			return ""
		}
		for _, preference := range []bool{false, true} {
			if pin, err := PinOf(vm, preference); err == nil && pin.Revision == o.Revision {
				return ""
			}
		}
		return "the pin has not moved to " + o.Revision
	}
	return ""
}
