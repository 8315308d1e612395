package instancetype

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// Judgement is KubeVirt's verdict on a moved VM as Judge reads it.
type Judgement struct {
	Observed events.Observed
	// Reason says what was seen or, at the deadline, waited for; Condition
	// and Message are the KubeVirt condition's reason and message that
	// decided it, if one did.
	Reason, Condition, Message string
	// Due, on a verdict not yet final, is when what stands becomes the
	// verdict if nothing changes before: the deadline after the move, or
	// after the migration's start, or the queue deadline.
	Due time.Time
	// Migration is the VM's live migration since the move, if the VMI
	// showed one.
	Migration *events.MigrationRecord
}

// Judge reads KubeVirt's verdict on a VM kvlive moved (its outcome o) from
// the VM and its VMI (nil when it has none) as they stand at now. final is
// false while the verdict may still change; at or past deadline (after the
// move) the verdict is what stands then: a hotplug or migration still
// under way is pending, a hotplug KubeVirt refuses is refused, no signal is
// not-observed, each saying what was waited for. A deadline of zero judges
// what stands now (a re-observation).
//
// In KubeVirt v1.9 a hot-plug reaches the guest only on a live
// migration's target: a running VM whose change waits for the workload
// updater's migration (KubeVirt runs few at a time) is queued, not yet
// judged, until its migration starts or the outcome's queue deadline
// passes; the verdict deadline then runs from the migration's start.
//
// A verdict rests only on state that follows the move: nothing is read
// before the VM shows its pin moved to the outcome's revision (or, at the
// deadline, another pin: a later move's), and a
// RestartRequired that was set before the move counts only for a VM
// predicted to need a restart (KubeVirt keeps the condition it had).
func Judge(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, now time.Time, deadline time.Duration) (j Judgement, final bool) {
	c := clockAt{now: now, deadline: deadline, queue: o.QueueDeadline, moved: o.FinishedAt}
	due := c.dueAt(o.FinishedAt)
	switch {
	case vm == nil:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "the VM was deleted before KubeVirt's verdict"}, true
	case string(vm.UID) != o.VM.UID:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "the VM was deleted and re-created before KubeVirt's verdict"}, true
	case o.Stopped != "":
		return judgeRestart(o, vm, vmi, due)
	case o.SwitchedTo != nil && !switchedTo(vm, *o.SwitchedTo):
		// Not (yet) seen switched: the cache lags the write, or someone
		// switched it back (a GitOps tool applying its source). Nothing
		// the VM or VMI shows is the switch's doing.
		if !due {
			return Judgement{Due: c.moved.Add(c.deadline)}, false
		}
		return Judgement{Observed: events.ObservedNotObserved, Reason: notSwitched(vm, *o.SwitchedTo)}, true
	case pinnedTo(vm, o.Revision):
		return judgePinned(o, vm, vmi, c)
	case !due:
		return Judgement{Due: c.moved.Add(c.deadline)}, false
	}
	// At the deadline the VM carries another pin: a later move (the
	// cache lags the move by far less than a deadline). What the VMI
	// shows still tells what became of this move's change.
	c.force = true
	j, final = judgePinned(o, vm, vmi, c)
	j.Reason += "; by then the VM carried another pin than " + o.Revision
	return j, final
}

// clockAt is when a verdict is read and the deadlines it is read against.
type clockAt struct {
	now             time.Time
	deadline, queue time.Duration
	moved           time.Time
	// force reads the verdict now whatever the time: a later pin stands
	// at the deadline. early reads only what decides before any deadline.
	force, early bool
}

// dueAt reports whether the verdict deadline counted from t has passed.
func (c clockAt) dueAt(t time.Time) bool {
	return !c.early && (c.force || c.deadline <= 0 || !c.now.Before(t.Add(c.deadline)))
}

// queueDue reports whether the queue deadline (the verdict deadline when
// the outcome has none) has passed, and when it passes.
func (c clockAt) queueDue() (bool, time.Time) {
	wait := max(c.queue, c.deadline)
	at := c.moved.Add(wait)
	return !c.early && (c.force || c.deadline <= 0 || !c.now.Before(at)), at
}

// movedSince is the earliest the outcome's move can have been: its
// attempt, or, when an earlier attempt had moved the VM, when the plan was
// stored (Outcome.MovedAfter).
func movedSince(o events.Outcome) time.Time {
	if !o.MovedAfter.IsZero() && o.MovedAfter.Before(o.FinishedAt) {
		return o.MovedAfter
	}
	return o.FinishedAt
}

// judgePinned reads the verdict on a VM the cache has seen moved.
func judgePinned(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, c clockAt) (Judgement, bool) {
	due := c.dueAt(c.moved)
	since := metav1.NewTime(movedSince(o).Add(-time.Second).Truncate(time.Second))
	rr, flagged := RestartRequired(vm)
	if o.Result == events.ResultEvict {
		// KubeVirt both flags RestartRequired (memory on a VMI that cannot
		// migrate) and evicts the VMI for its CPU hot-plug: the eviction
		// decides, and only a VMI still not replaced at the queue deadline
		// leaves the condition to.
		j, final := judgeEvicted(o, vmi, c)
		if !final || j.Observed == events.ObservedEvicted || !flagged {
			return j, final
		}
		return Judgement{Observed: events.ObservedRestart, Reason: "KubeVirt set RestartRequired and evicted no VMI by the queue deadline",
			Condition: rr.Reason, Message: rr.Message}, true
	}
	if flagged && answers(o, vm, rr, since) {
		why := "KubeVirt set RestartRequired"
		if unchanged(o, rr) {
			why = fmt.Sprintf("KubeVirt kept RestartRequired when it synced the moved VM (status.desiredGeneration %d)", vm.Status.DesiredGeneration)
		}
		return Judgement{Observed: events.ObservedRestart, Reason: why, Condition: rr.Reason, Message: rr.Message}, true
	}
	switch {
	case vmi == nil:
		return Judgement{Observed: events.ObservedNextBoot, Reason: "the VM is not running; its pin moved for the next boot"}, true
	case vmi.CreationTimestamp.After(o.FinishedAt.Truncate(time.Second)):
		// Creation times are whole seconds: only a later second than the
		// move's says the VMI was created after it.
		return Judgement{Observed: events.ObservedNextBoot, Reason: "the VM booted after the move, on its new pin"}, true
	}
	if flagged {
		// As it stood before the move. virt-controller recomputes the
		// condition on every sync but rewrites it only when it changes, so
		// nothing tells a sync that kept it from one yet to come: the
		// move's hotplug done, the condition gone or rewritten, decides
		// before the deadline; what still stands at the deadline holds.
		early := c
		early.early = true
		if j, final := judgeRunning(o, vm, vmi, since, early); final && j.Observed == events.ObservedLive {
			return j, true
		}
		if !due {
			return Judgement{Due: c.moved.Add(c.deadline)}, false
		}
		return Judgement{Observed: events.ObservedRestart, Reason: "RestartRequired, set before the move, still stands unchanged at the deadline (KubeVirt rewrites no condition it keeps)",
			Condition: rr.Reason, Message: rr.Message}, true
	}
	return judgeRunning(o, vm, vmi, since, c)
}

// migrationSince is the VMI's migration since the move: begun no earlier
// than since, and not the one the VMI showed at the move.
func migrationSince(o events.Outcome, vmi *virtv1.VirtualMachineInstance, since metav1.Time) Migration {
	m := MigrationSince(vmi, since.Time)
	if o.AtMove != nil && m.UID != "" && m.UID == o.AtMove.Migration {
		return Migration{}
	}
	return m
}

// judgeEvicted reads the verdict on a VM whose VMI KubeVirt's workload
// updater was predicted to evict: a VMI started after the move (or none)
// is the VMI replaced, which the reason says without claiming who did it
// (the VM's VMI shows no eviction); the old VMI still running waits in the updater's
// eviction batches, queued until the queue deadline.
func judgeEvicted(o events.Outcome, vmi *virtv1.VirtualMachineInstance, c clockAt) (Judgement, bool) {
	switch {
	case vmi == nil:
		return Judgement{Observed: events.ObservedEvicted, Reason: "the VMI that ran at the move is gone and none runs (an eviction, or another stop); the change applies at the next start"}, true
	case vmi.CreationTimestamp.After(o.FinishedAt.Truncate(time.Second)):
		return Judgement{Observed: events.ObservedEvicted, Reason: "the VM runs a VMI started after the move, on its new pin (an eviction, or another restart)"}, true
	}
	due, at := c.queueDue()
	if !due {
		return Judgement{Due: at}, false
	}
	return Judgement{Observed: events.ObservedQueued, Reason: "the VMI was not evicted by the queue deadline: KubeVirt's workload updater evicts a few VMIs a minute (batchEvictionSize per batchEvictionInterval)"}, true
}

// judgeRunning reads the verdict on a running VM without RestartRequired,
// with the VM's migration since the move, if any.
func judgeRunning(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, since metav1.Time, c clockAt) (Judgement, bool) {
	j, final := judgeLive(o, vm, vmi, since, c)
	j.Migration = migrationSince(o, vmi, since).Record()
	return j, final
}

// judgeLive reads the verdict on a running VM without RestartRequired.
func judgeLive(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, since metav1.Time, c clockAt) (Judgement, bool) {
	want := expectOnVMI(o.Changes)
	conds := HotplugPending(vmi)
	m := migrationSince(o, vmi, since)
	pending := conds
	if m.Running {
		pending = append(slices.Clone(conds), "migration "+m.UID)
	}
	seen, reached := want.SeenOn(vmi), want.Reached(vmi)
	refused, isRefused := HotplugRefused(vm)
	isRefused = isRefused && answers(o, vm, refused, since)
	// A hot-plug waits on the VMI for a migration to start: the workload
	// updater's turn (or, on a VMI that cannot live-migrate, none ever).
	held := len(conds) > 0 && !m.Running && (o.Result == events.ResultRestart || !Migratable(vmi))
	waiting := len(conds) > 0 && !m.Running && !held
	dueAt := c.moved.Add(c.deadline)
	due := c.dueAt(c.moved)
	switch {
	case waiting:
		due, dueAt = c.queueDue()
	case m.Running && m.Started != nil:
		dueAt, due = m.Started.Add(c.deadline), c.dueAt(*m.Started)
	case m.Running:
		// Handed to the target, not yet started by the source.
		due, dueAt = c.queueDue()
	}
	switch {
	case !want.isZero() && seen && reached && len(pending) == 0 && !isRefused && m.Succeeded:
		return Judgement{Observed: events.ObservedLive, Reason: "the VMI runs the new sockets and memory: migration " + m.UID + " carried them to " + m.Target + m.failedNote() + guestNote(vmi, want)}, true
	case !due:
		return Judgement{Due: dueAt}, false
	case want.isZero() && o.Result == events.ResultLive:
		// Nothing to hot-plug (a change KubeVirt takes without one, or one
		// that sets a field back to what the VMI started with): only the
		// absence of RestartRequired over the whole wait tells.
		return Judgement{Observed: events.ObservedLive, Reason: "no RestartRequired by the deadline; nothing to hot-plug"}, true
	case isRefused && !seen:
		// Not on the VMI: this move's hotplug is the one refused.
		return Judgement{Observed: events.ObservedRefused, Reason: "KubeVirt refused the hotplug", Condition: refused.Reason, Message: refused.Message}, true
	case held:
		return Judgement{Observed: events.ObservedRestart, Reason: strings.Join(conds, ", ") + " stands and no migration carries it (" + heldWhy(vmi) +
			"): the change reaches the guest at the VM's next restart; KubeVirt sets no RestartRequired for this"}, true
	case waiting:
		return Judgement{Observed: events.ObservedQueued, Reason: "no live migration had started for " + strings.Join(conds, ", ") +
			" by the queue deadline (KubeVirt runs a few at a time)" + m.failedNote()}, true
	case len(pending) > 0:
		// On the VMI and under way (a later move's refusal, "another
		// hotplug is in progress", is about that move).
		return Judgement{Observed: events.ObservedPending, Reason: "still in progress at the deadline: " + strings.Join(pending, ", ") + m.failedNote()}, true
	case isRefused:
		return Judgement{Observed: events.ObservedRefused, Reason: "KubeVirt refused the hotplug", Condition: refused.Reason, Message: refused.Message}, true
	case o.Result == events.ResultRestart:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "RestartRequired was not set by the deadline, nor the change hot-plugged"}, true
	case !seen:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "virt-controller did not put the new sockets and memory on the VMI by the deadline"}, true
	case reached && !m.Succeeded:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "the VMI shows the new sockets and memory, but no live migration since the move carried them"}, true
	}
	return Judgement{Observed: events.ObservedPending, Reason: "the VMI's status did not show the new sockets and memory by the deadline" + m.failedNote()}, true
}

// heldWhy says why no migration will carry a VMI's hot-plug.
func heldWhy(vmi *virtv1.VirtualMachineInstance) string {
	if !Migratable(vmi) {
		return "the VMI is not live-migratable"
	}
	return "KubeVirt's workloadUpdateMethods lack LiveMigrate"
}

// guestNote says when the guest has not onlined all the memory it was
// given: KubeVirt reports it (status.memory.guestCurrent) and it is no
// failure of the hot-plug.
func guestNote(vmi *virtv1.VirtualMachineInstance, want LiveWant) string {
	mem := vmi.Status.Memory
	if want.Memory == nil || mem == nil || mem.GuestCurrent == nil || mem.GuestCurrent.Cmp(*want.Memory) >= 0 {
		return ""
	}
	// Copies: String caches its text in the Quantity, and the VMI is a
	// shared cache's.
	current, wanted := mem.GuestCurrent.DeepCopy(), want.Memory.DeepCopy()
	return "; the guest has onlined " + current.String() + " of " + wanted.String() + " so far"
}

// switchedTo reports whether vm references obj in its spec and KubeVirt
// has taken the switch up (its status names obj, or nothing yet).
func switchedTo(vm *virtv1.VirtualMachine, obj events.Ref) bool {
	preference := obj.IsPreference()
	if ref, ok := RefOf(vm, preference); !ok || ref != obj {
		return false
	}
	status := vm.Status.InstancetypeRef
	if preference {
		status = vm.Status.PreferenceRef
	}
	return status == nil || status.Name == "" || status.Name == obj.Name
}

// notSwitched says, at the deadline, why a switched VM's verdict was not
// read: what it references instead and, where the managed fields say,
// which managers hold that reference.
func notSwitched(vm *virtv1.VirtualMachine, obj events.Ref) string {
	preference := obj.IsPreference()
	ref, ok := RefOf(vm, preference)
	if ok && ref == obj {
		return fmt.Sprintf("the VM references %s, but virt-controller had not taken the switch up by the deadline (its status names another)", obj)
	}
	what := "nothing"
	if ok {
		what = ref.String()
	}
	why := fmt.Sprintf("the VM references %s, not %s it was switched to: switched back or elsewhere since", what, obj)
	paths := WrittenPaths(events.Target{Move: events.MoveSwitch, Object: obj}, "")
	if owners := FieldOwners(vm, paths...); len(owners) > 0 {
		why += " (by " + strings.Join(owners, ", ") + ", which manages " + strings.Join(paths[0], ".") + ")"
	}
	return why
}

// pinnedTo reports whether the VM's instance type or preference pin is
// revision (any pin when the outcome names none).
func pinnedTo(vm *virtv1.VirtualMachine, revision string) bool {
	if revision == "" {
		return true
	}
	for _, preference := range []bool{false, true} {
		if pin, err := PinOf(vm, preference); err == nil && pin.Revision == revision {
			return true
		}
	}
	return false
}

// expectOnVMI is what every CPU socket and guest memory change would show
// on the VMI were it hot-plugged, whatever kvlive predicted of it: KubeVirt
// may hot-plug a change kvlive expected to need a restart.
func expectOnVMI(changes []events.Change) LiveWant {
	all := make([]events.Change, len(changes))
	for i, c := range changes {
		c.Class = string(events.ResultLive)
		all[i] = c
	}
	return ExpectLive(all)
}

func (w LiveWant) isZero() bool { return w.Sockets == 0 && w.Memory == nil }
