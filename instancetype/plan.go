package instancetype

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// Change classes.
const (
	ClassLive     = "live"
	ClassRestart  = "restart"
	ClassNextBoot = "next-boot"
)

// Input is everything the decision depends on.
type Input struct {
	VM *virtv1.VirtualMachine
	// VMI is the running instance, nil when the VM is not running.
	VMI *virtv1.VirtualMachineInstance
	// Pinned is the generation the VM is pinned to now, Target the one it moves to.
	Pinned, Target Generation
	Cluster        Cluster
	// Memo, when set, shares expansion work between the VMs of one event.
	Memo *Memo
	// Started is what the running VMI started from, when known: KubeVirt
	// decides RestartRequired against it on every sync, not against the pin
	// the VM has now.
	Started *Started
	// StartedErr is why Started could not be read, when it could not.
	StartedErr error
}

// Started is the VM spec KubeVirt recorded when the VMI started (the
// ControllerRevision vmi.status.virtualMachineRevisionName names), with the
// generation its pins held then.
type Started struct {
	Template   *virtv1.VirtualMachineInstanceTemplateSpec
	Generation Generation
}

// Decision is a VM's plan: its result, why, and every changed field.
type Decision struct {
	Action  events.Result
	Reason  string
	Changes []events.Change
}

// Decide predicts what KubeVirt does once the VM's pin moves from Pinned to Target.
func Decide(in Input) Decision {
	if in.Cluster.expandsReferences() {
		return Decision{Action: events.ResultSkip, Reason: fmt.Sprintf(
			"KubeVirt referencePolicy %q expands instance types into VM specs: there is no reference to move", in.Cluster.ReferencePolicy)}
	}
	from, to := expand(in.VM, in.Pinned, in.Memo), expand(in.VM, in.Target, in.Memo)
	if running(in.VMI) {
		// KubeVirt's hotplug handlers compare the target with the VMI, not
		// with the pin: a hotplug refused earlier (memory on a VMI that
		// cannot migrate) is still wanted, and decided again, after the move.
		fromVMI(&from, in.VMI)
	}
	changes := diff(from, to)
	if !running(in.VMI) {
		for i := range changes {
			changes[i].Class = ClassNextBoot
		}
		return Decision{Action: events.ResultNextBoot, Reason: "VM is not running: the new generation applies at its next start", Changes: changes}
	}
	d := decideRunning(in, to, changes)
	if len(changes) == 0 && d.Action == events.ResultRestart {
		d.Reason = "the expanded VM spec does not change, but " + d.Reason
	}
	d.Changes = append(d.Changes, nextBootLimits(in, from, to)...)
	return d
}

func decideRunning(in Input, to view, changes []events.Change) Decision {
	blocker := restartBlocker(in, to, changes)
	if len(changes) == 0 {
		if blocker != "" && hasRestartRequired(in.VM) {
			return Decision{Action: events.ResultRestart, Reason: "RestartRequired stays: " + blocker}
		}
		return Decision{Action: events.ResultLive, Reason: "the expanded VM spec does not change: only the pin moves"}
	}
	var restartWhy []string
	for i := range changes {
		c := &changes[i]
		class, why := classify(in, to, c)
		if blocker == "" && in.Started != nil && !liveUpdatable(c.Field) && !nextBootOnly(c.Field) {
			// Without a blocker, a non-live field that changes goes back
			// to what the VMI runs: nothing to wait for.
			class, why = ClassLive, ""
		}
		if blocker != "" && class == ClassLive {
			class, why = ClassRestart, blocker
		}
		c.Class = class
		if class == ClassRestart {
			restartWhy = append(restartWhy, c.Field+": "+why)
		}
	}
	if d, ok := byMigration(in, changes, restartWhy); ok {
		return d
	}
	if len(restartWhy) > 0 {
		return Decision{Action: events.ResultRestart, Reason: "RestartRequired: " + strings.Join(restartWhy, "; "), Changes: changes}
	}
	return Decision{Action: events.ResultLive, Reason: "KubeVirt hot-plugs every change into the running VMI, carried to the guest by a live migration", Changes: changes}
}

// hotplugged reports a change virt-controller hot-plugs into the VMI's
// spec, which reaches the guest only on a migration's target.
func hotplugged(c events.Change) bool {
	return c.Class == ClassLive && (c.Field == "cpu.sockets" || c.Field == "memory.guest")
}

// byMigration decides a running VM whose sockets or guest memory
// virt-controller hot-plugs into the VMI: in KubeVirt v1.9 that reaches the
// guest only through the workload updater
// (pkg/virt-controller/watch/workload-updater), which live-migrates a
// live-migratable VMI when workloadUpdateMethods holds LiveMigrate, else
// evicts it when they hold Evict, else leaves the change on the VMI's spec
// for the next boot, with no RestartRequired. ok is false when nothing is
// hot-plugged (or RestartRequired decides alone).
func byMigration(in Input, changes []events.Change, restartWhy []string) (Decision, bool) {
	if !slices.ContainsFunc(changes, hotplugged) {
		return Decision{}, false
	}
	migratable := vmiCondition(in.VMI, virtv1.VirtualMachineInstanceIsMigratable, k8scorev1.ConditionTrue)
	if in.Cluster.LiveMigrate && migratable {
		return Decision{}, false
	}
	why := "the VMI is not live-migratable"
	if !in.Cluster.LiveMigrate {
		why = "KubeVirt's workloadUpdateMethods lack LiveMigrate"
	}
	if in.Cluster.Evict {
		for i := range changes {
			if hotplugged(changes[i]) {
				changes[i].Class = ClassRestart
			}
		}
		return Decision{Action: events.ResultEvict, Changes: changes, Reason: "KubeVirt evicts the VMI to bring hot-plugged CPU and memory in (" + why +
			"; workloadUpdateMethods hold Evict): the VM restarts on its own as its run strategy says"}, true
	}
	var held []string
	for i := range changes {
		if hotplugged(changes[i]) {
			changes[i].Class = ClassRestart
			held = append(held, changes[i].Field)
		}
	}
	reason := "no live migration carries " + strings.Join(held, " and ") + " to the guest (" + why +
		"): the change waits on the VMI for a restart, and KubeVirt sets no RestartRequired for it"
	if len(restartWhy) > 0 {
		reason = "RestartRequired: " + strings.Join(restartWhy, "; ") + "; and " + reason
	}
	return Decision{Action: events.ResultRestart, Changes: changes, Reason: reason}, true
}

// fromVMI takes the live-updatable values a running VMI has now.
func fromVMI(v *view, vmi *virtv1.VirtualMachineInstance) {
	if c := vmi.Spec.Domain.CPU; c != nil && c.Sockets != 0 {
		v.sockets = c.Sockets
	}
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		v.guest = m.Guest
	}
}

// restartBlocker says why nothing can go live on this VM at all, or "".
// pkg/virt-controller/watch/vm/vm.go sync: the hotplug handlers run only
// under LiveUpdate, when syncRestartRequired found no non-live-updatable
// difference between the expanded spec the VMI started from and the one the
// VM asks for now. That check runs on every sync: a RestartRequired set
// earlier is cleared when only live-updatable fields differ (the hotplug
// handlers set it again while their cause holds), so an existing condition
// holds a new change only where the VMI's start differs for good, and a
// non-live field set back to its start value holds nothing. Without the
// start (a VM without RestartRequired, whose VMI runs what its pin says),
// the pin stands for it.
func restartBlocker(in Input, to view, changes []events.Change) string {
	if !in.Cluster.LiveUpdate {
		return "the KubeVirt vmRolloutStrategy is Stage: every change waits for a restart"
	}
	if in.Started != nil {
		// What the VMI started from decides, not the pin the VM leaves: a
		// non-live field the move sets back to its start value clears the
		// condition it once set.
		started := in.VM.DeepCopy()
		started.Spec.Template = in.Started.Template
		for _, c := range diff(expand(started, in.Started.Generation, in.Memo), to) {
			if !liveUpdatable(c.Field) && !nextBootOnly(c.Field) {
				return fmt.Sprintf("%s differs from what the VMI started with (%s → %s)", c.Field, c.From, c.To)
			}
		}
		if !sameTemplateButLive(in.Started.Template, in.VM.Spec.Template) {
			return "the VM template changed since the VMI started"
		}
		return ""
	}
	for _, c := range changes {
		if !liveUpdatable(c.Field) && !nextBootOnly(c.Field) {
			return "a non-live-updatable field changes too (" + c.Field + "), so KubeVirt hot-plugs nothing"
		}
	}
	if !hasRestartRequired(in.VM) {
		return ""
	}
	why := ""
	if in.StartedErr != nil {
		why = " (" + in.StartedErr.Error() + ")"
	}
	return "the VM already has RestartRequired and kvlive could not read what its VMI started from" + why +
		", so it cannot tell whether KubeVirt clears it: every live change is taken as held until a restart"
}

// nextBootOnly lists the fields that reach the VMI's metadata, which
// syncRestartRequired does not compare.
func nextBootOnly(field string) bool {
	return field == "annotations" || field == "preference.annotations"
}

// sameTemplateButLive compares two VM templates' specs the way
// syncRestartRequired does once the live-updatable fields and the firmware
// UUID (which virt-controller persists into the VM after start) are set
// aside.
func sameTemplateButLive(a, b *virtv1.VirtualMachineInstanceTemplateSpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	strip := func(t *virtv1.VirtualMachineInstanceTemplateSpec) virtv1.VirtualMachineInstanceSpec {
		s := *t.Spec.DeepCopy()
		s.NodeSelector, s.Affinity, s.Tolerations = nil, nil, nil
		if s.Domain.CPU != nil {
			s.Domain.CPU.Sockets = 0
		}
		if s.Domain.Memory != nil {
			s.Domain.Memory.Guest = nil
		}
		if s.Domain.Firmware != nil {
			s.Domain.Firmware.UUID = ""
			if equality.Semantic.DeepEqual(*s.Domain.Firmware, virtv1.Firmware{}) {
				// virt-controller's firmware synchroniser adds the UUID
				// to a VM started without firmware.
				s.Domain.Firmware = nil
			}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

func hasRestartRequired(vm *virtv1.VirtualMachine) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == virtv1.VirtualMachineRestartRequired && c.Status == k8scorev1.ConditionTrue {
			return true
		}
	}
	return false
}

// liveUpdatable lists the fields syncRestartRequired copies over before
// comparing (pkg/virt-controller/watch/vm/vm.go): sockets, memory.guest,
// nodeSelector, affinity and tolerations.
func liveUpdatable(field string) bool {
	switch field {
	case "cpu.sockets", "memory.guest", "nodeSelector":
		return true
	}
	return false
}

func classify(in Input, to view, c *events.Change) (class, why string) {
	switch c.Field {
	case "annotations", "preference.annotations":
		return ClassNextBoot, ""
	case "cpu.sockets":
		return classifySockets(in, to)
	case "memory.guest":
		return classifyMemory(in, to)
	case "nodeSelector":
		return ClassLive, ""
	case "cpu.maxSockets", "memory.maxGuest":
		return ClassRestart, "a changed hotplug limit takes effect only at boot"
	}
	return ClassRestart, "not live-updatable"
}

// classifySockets follows handleCPUChangeRequest (pkg/virt-controller/watch/vm/vm.go).
func classifySockets(in Input, to view) (string, string) {
	cpu := in.VMI.Spec.Domain.CPU
	switch {
	case cpu == nil:
		return ClassNextBoot, "the VMI has no CPU topology to hot-plug into"
	case to.sockets == cpu.Sockets:
		return ClassLive, ""
	case to.sockets > cpu.MaxSockets:
		return ClassRestart, fmt.Sprintf("%d sockets exceed the VMI's maxSockets %d", to.sockets, cpu.MaxSockets)
	case to.sockets < cpu.Sockets:
		return ClassRestart, "removing CPU sockets needs a restart"
	case architecture(in) == "arm64":
		return ClassRestart, "arm64 does not support CPU hotplug"
	}
	return ClassLive, ""
}

// Memory hotplug constants from pkg/liveupdate/memory/memory.go.
const (
	blockAlignment     = 2 << 20 // HotplugBlockAlignmentBytes
	hugeAlignment      = 1 << 30 // Hotplug1GHugePagesBlockAlignmentBytes
	minHotplugGuestMem = 1 << 30 // requiredMinGuestMemory
)

// classifyMemory follows handleMemoryHotplugRequest (pkg/virt-controller/watch/vm/vm.go)
// and ValidateLiveUpdateMemory (pkg/liveupdate/memory/memory.go).
func classifyMemory(in Input, to view) (string, string) {
	vmi := in.VMI
	mem := vmi.Spec.Domain.Memory
	if to.guest == nil || mem == nil || mem.Guest == nil || vmi.Status.Memory == nil || vmi.Status.Memory.GuestCurrent == nil {
		return ClassNextBoot, "the VMI reports no guest memory, so KubeVirt does not hot-plug it"
	}
	if vmiCondition(vmi, virtv1.VirtualMachineInstanceMemoryChange, k8scorev1.ConditionFalse) {
		return ClassRestart, "an earlier memory hotplug failed on this VMI"
	}
	if to.guest.Equal(*mem.Guest) {
		return ClassLive, ""
	}
	if !vmiCondition(vmi, virtv1.VirtualMachineInstanceIsMigratable, k8scorev1.ConditionTrue) {
		return ClassRestart, "memory hotplug needs a live-migratable VMI"
	}
	if mem.MaxGuest == nil {
		return ClassRestart, "the VMI has no maxGuest, so memory hotplug is off"
	}
	if why := memoryUnsupported(in, to, mem.MaxGuest); why != "" {
		return ClassRestart, why
	}
	if atBoot := vmi.Status.Memory.GuestAtBoot; atBoot != nil && to.guest.Cmp(*atBoot) < 0 {
		return ClassRestart, "memory below what the VM booted with (" + quantity(atBoot) + ")"
	}
	return ClassLive, ""
}

func memoryUnsupported(in Input, to view, maxGuest *resource.Quantity) string {
	tmpl := virtv1.DomainSpec{}
	if in.VM.Spec.Template != nil {
		tmpl = in.VM.Spec.Template.Spec.Domain
	}
	it := in.Target.Instancetype
	switch {
	case (it != nil && it.CPU.Realtime != nil) || (tmpl.CPU != nil && tmpl.CPU.Realtime != nil):
		return "memory hotplug is not compatible with realtime VMs"
	case (it != nil && it.CPU.NUMA != nil && it.CPU.NUMA.GuestMappingPassthrough != nil) ||
		(tmpl.CPU != nil && tmpl.CPU.NUMA != nil && tmpl.CPU.NUMA.GuestMappingPassthrough != nil):
		return "memory hotplug is not compatible with guest mapping passthrough"
	case tmpl.LaunchSecurity != nil:
		return "memory hotplug is not compatible with encrypted VMs"
	case to.guest.Cmp(*maxGuest) > 0:
		return fmt.Sprintf("%s exceeds the VMI's maxGuest %s", to.guest, maxGuest)
	}
	align := int64(blockAlignment)
	if hugepages1Gi(in, tmpl) {
		align = hugeAlignment
	}
	switch {
	case to.guest.Value()%align != 0:
		return "guest memory must be " + resource.NewQuantity(align, resource.BinarySI).String() + " aligned"
	case maxGuest.Value()%align != 0:
		return "maxGuest must be " + resource.NewQuantity(align, resource.BinarySI).String() + " aligned"
	case architecture(in) != "amd64":
		return "memory hotplug is only available for amd64 VMs"
	case to.guest.Value() < minHotplugGuestMem:
		return "memory hotplug needs at least 1Gi of guest memory"
	}
	return ""
}

func hugepages1Gi(in Input, tmpl virtv1.DomainSpec) bool {
	if it := in.Target.Instancetype; it != nil && it.Memory.Hugepages != nil {
		return it.Memory.Hugepages.PageSize == "1Gi"
	}
	return tmpl.Memory != nil && tmpl.Memory.Hugepages != nil && tmpl.Memory.Hugepages.PageSize == "1Gi"
}

// architecture is the VM template's, as defaulted by KubeVirt's webhook,
// falling back to the preference and then to what the VMI runs as.
func architecture(in Input) string {
	if t := in.VM.Spec.Template; t != nil && t.Spec.Architecture != "" {
		return t.Spec.Architecture
	}
	if p := in.Target.Preference; p != nil && p.PreferredArchitecture != nil {
		return *p.PreferredArchitecture
	}
	if in.VMI != nil {
		return in.VMI.Spec.Architecture
	}
	return ""
}

func running(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
}

func vmiCondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType, s k8scorev1.ConditionStatus) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == t {
			return c.Status == s
		}
	}
	return false
}

// diff lists the changed fields between two views, CPU and memory first.
func diff(a, b view) []events.Change {
	var out []events.Change
	add := func(field, from, to string) {
		if from != to {
			out = append(out, events.Change{Field: field, From: display(from), To: display(to)})
		}
	}
	add("cpu.sockets", u32(a.sockets), u32(b.sockets))
	add("cpu.cores", u32(a.cores), u32(b.cores))
	add("cpu.threads", u32(a.threads), u32(b.threads))
	add("cpu.maxSockets", u32(a.maxSockets), u32(b.maxSockets))
	add("memory.guest", quantity(a.guest), quantity(b.guest))
	add("memory.maxGuest", quantity(a.maxGuest), quantity(b.maxGuest))
	for _, k := range diffKeys(a.other, b.other) {
		add(k, a.other[k], b.other[k])
	}
	for _, k := range diffKeys(a.nextBoot, b.nextBoot) {
		add(k, a.nextBoot[k], b.nextBoot[k])
	}
	return out
}

// quantity renders q without writing to it: Quantity.String caches its
// text in the value, and the quantities read here are the informer cache's,
// shared with every reader in the process.
func quantity(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	c := q.DeepCopy()
	return c.String()
}

// u32 renders a count, with zero as unset.
func u32(n uint32) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(n), 10)
}
