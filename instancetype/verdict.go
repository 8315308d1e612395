package instancetype

import (
	"fmt"
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
}

// Judge reads KubeVirt's verdict on a VM kvlive moved (its outcome o) from
// the VM and its VMI (nil when it has none) as they stand at now. final is
// false while the verdict may still change; at or past deadline (after the
// move) the verdict is what stands then: a hotplug or migration still
// under way is pending, a hotplug KubeVirt refuses is refused, no signal is
// not-observed, each saying what was waited for.
//
// A verdict rests only on state that follows the move: nothing is read
// before the VM shows its pin moved to the outcome's revision (or, at the
// deadline, another pin: a later move's), and a
// RestartRequired that was set before the move counts only for a VM
// predicted to need a restart (KubeVirt keeps the condition it had).
func Judge(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, now time.Time, deadline time.Duration) (j Judgement, final bool) {
	due := !now.Before(o.FinishedAt.Add(deadline))
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
			return Judgement{}, false
		}
		return Judgement{Observed: events.ObservedNotObserved, Reason: notSwitched(vm, *o.SwitchedTo)}, true
	case pinnedTo(vm, o.Revision):
		return judgePinned(o, vm, vmi, due)
	case !due:
		return Judgement{}, false
	}
	// At the deadline the VM carries another pin: a later move (the
	// cache lags the move by far less than a deadline). What the VMI
	// shows still tells what became of this move's change.
	j, final = judgePinned(o, vm, vmi, true)
	j.Reason += "; by then the VM carried another pin than " + o.Revision
	return j, final
}

// judgePinned reads the verdict on a VM the cache has seen moved.
func judgePinned(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, due bool) (Judgement, bool) {
	since := metav1.NewTime(o.FinishedAt.Add(-time.Second).Truncate(time.Second))
	rr, flagged := RestartRequired(vm)
	if flagged && !rr.LastTransitionTime.Before(&since) {
		return Judgement{Observed: events.ObservedRestart, Reason: "KubeVirt set RestartRequired", Condition: rr.Reason, Message: rr.Message}, true
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
		// Set before the move. virt-controller recomputes the condition on
		// every sync but rewrites it only when its status changes, so
		// nothing tells a sync that kept it from one yet to come: the
		// move's hotplug done, or the condition gone, decides before the
		// deadline; what still stands at the deadline holds.
		if j, final := judgeRunning(o, vm, vmi, since, false); final && j.Observed == events.ObservedLive {
			return j, true
		}
		if !due {
			return Judgement{}, false
		}
		return Judgement{Observed: events.ObservedRestart, Reason: "RestartRequired, set before the move, still stands at the deadline", Condition: rr.Reason, Message: rr.Message}, true
	}
	return judgeRunning(o, vm, vmi, since, due)
}

// judgeRunning reads the verdict on a running VM without RestartRequired.
func judgeRunning(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, since metav1.Time, due bool) (Judgement, bool) {
	want := expectOnVMI(o.Changes)
	pending := HotplugPending(vmi)
	if m := vmi.Status.MigrationState; m != nil && !m.Completed && !m.Failed {
		pending = append(pending, "migration "+string(m.MigrationUID))
	}
	seen, reached := want.SeenOn(vmi), want.Reached(vmi)
	refused, isRefused := HotplugRefused(vm)
	isRefused = isRefused && !refused.LastTransitionTime.Before(&since)
	switch {
	case !want.isZero() && seen && reached && len(pending) == 0 && !isRefused:
		return Judgement{Observed: events.ObservedLive, Reason: "the VMI runs the new sockets and memory"}, true
	case !due:
		return Judgement{}, false
	case want.isZero() && o.Result == events.ResultLive:
		// Nothing to hot-plug (a change KubeVirt takes without one, or one
		// that sets a field back to what the VMI started with): only the
		// absence of RestartRequired over the whole wait tells.
		return Judgement{Observed: events.ObservedLive, Reason: "no RestartRequired by the deadline; nothing to hot-plug"}, true
	case isRefused && !seen:
		// Not on the VMI: this move's hotplug is the one refused.
		return Judgement{Observed: events.ObservedRefused, Reason: "KubeVirt refused the hotplug", Condition: refused.Reason, Message: refused.Message}, true
	case len(pending) > 0:
		// On the VMI and under way (a later move's refusal, "another
		// hotplug is in progress", is about that move).
		return Judgement{Observed: events.ObservedPending, Reason: "still in progress at the deadline: " + strings.Join(pending, ", ")}, true
	case isRefused:
		return Judgement{Observed: events.ObservedRefused, Reason: "KubeVirt refused the hotplug", Condition: refused.Reason, Message: refused.Message}, true
	case o.Result == events.ResultRestart:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "RestartRequired was not set by the deadline, nor the change hot-plugged"}, true
	case !seen:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "virt-controller did not put the new sockets and memory on the VMI by the deadline"}, true
	}
	return Judgement{Observed: events.ObservedPending, Reason: "the VMI's status did not show the new sockets and memory by the deadline"}, true
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
