package instancetype

import (
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// RestartChanges lists what restarting vm brings to its running vmi: each
// field of the spec its pins expand to that differs from what the VMI runs
// (what it started from, as its start revision says, with the sockets and
// memory it runs now), every one of class restart.
func RestartChanges(l Lookup, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, memo *Memo) ([]events.Change, error) {
	pinned, err := PinnedGeneration(l, vm, memo)
	if err != nil {
		return nil, err
	}
	to := expand(vm, pinned, memo)
	from := to
	if started, err := StartedFrom(l, vmi, memo); err == nil {
		at := vm.DeepCopy()
		at.Spec.Template = started.Template
		from = expand(at, started.Generation, memo)
	}
	fromVMI(&from, vmi)
	changes := diff(from, to)
	for i := range changes {
		changes[i].Class = ClassRestart
	}
	return changes, nil
}

// Running reports whether vmi runs: phase Running and not being deleted.
func Running(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi != nil && vmi.DeletionTimestamp == nil && vmi.Status.Phase == virtv1.Running
}

// judgeRestart reads KubeVirt's verdict on a VM kvlive asked to restart
// (o.Stopped names the VMI it asked to stop): restarted once a VMI other
// than that one runs, showing the sockets and memory the restart brings,
// and RestartRequired is gone; at the deadline, pending while the old VMI
// still runs or the new one is not there yet, else not observed, saying
// what was missing.
func judgeRestart(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, due bool) (Judgement, bool) {
	rr, flagged := RestartRequired(vm)
	fresh := vmi != nil && string(vmi.UID) != o.Stopped
	want := expectOnVMI(o.Changes)
	if fresh && Running(vmi) && !flagged && (want.isZero() || want.SeenOn(vmi)) {
		return Judgement{Observed: events.ObservedRestarted, Reason: "a new VMI runs with the VM's pinned sockets and memory, and RestartRequired is gone"}, true
	}
	if !due {
		return Judgement{}, false
	}
	switch {
	case vmi == nil && len(vm.Status.StateChangeRequests) > 0:
		return Judgement{Observed: events.ObservedPending, Reason: "the old VMI is gone and the new one not started at the deadline"}, true
	case vmi == nil:
		return Judgement{Observed: events.ObservedNotObserved, Reason: "no VMI at the deadline, and no start requested: the VM was stopped"}, true
	case !fresh:
		return Judgement{Observed: events.ObservedPending, Reason: "the VMI asked to stop still runs at the deadline"}, true
	case !Running(vmi):
		return Judgement{Observed: events.ObservedPending, Reason: "the new VMI is " + string(vmi.Status.Phase) + ", not running, at the deadline"}, true
	case flagged:
		return Judgement{Observed: events.ObservedRestart, Reason: "a new VMI runs, but RestartRequired still stands", Condition: rr.Reason, Message: rr.Message}, true
	}
	return Judgement{Observed: events.ObservedNotObserved, Reason: "a new VMI runs, but not with the sockets and memory the restart was to bring"}, true
}

// restartState says why a restarted VM is not yet where its outcome left
// it, or "" when it is (a gate without verdicts).
func restartState(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) string {
	if j, final := judgeRestart(o, vm, vmi, false); final && j.Observed == events.ObservedRestarted {
		return ""
	}
	return "not running a new VMI without RestartRequired yet"
}
