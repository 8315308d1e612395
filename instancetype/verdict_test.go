package instancetype

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// TestJudge reads KubeVirt's verdict from the VM and VMI as virt-controller
// leaves them after each kind of move, before and at the deadline.
func TestJudge(t *testing.T) {
	moved := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const deadline = 2 * time.Minute
	before, early, late := metav1.NewTime(moved.Add(-time.Hour)), moved.Add(10*time.Second), moved.Add(deadline)
	out := func(r events.Result, changes ...events.Change) events.Outcome {
		return events.Outcome{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "vm", UID: "u1"}, Result: r, Revision: "vm-new", Changes: changes, FinishedAt: moved}
	}
	sockets := events.Change{Field: "cpu.sockets", From: "2", To: "4", Class: "live"}
	memRestart := events.Change{Field: "memory.guest", From: "2Gi", To: "4Gi", Class: "restart"}
	model := events.Change{Field: "cpu.model", From: "a", To: "b", Class: "restart"}
	vm := func(rev string, conds ...virtv1.VirtualMachineCondition) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "u1"},
			Spec:   virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: "it"}},
			Status: virtv1.VirtualMachineStatus{InstancetypeRef: &virtv1.InstancetypeStatusRef{ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: rev}}, Conditions: conds}}
	}
	cond := func(typ virtv1.VirtualMachineConditionType, reason string, at metav1.Time) virtv1.VirtualMachineCondition {
		return virtv1.VirtualMachineCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: reason + " message", LastTransitionTime: at}
	}
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	vmi := func(sockets uint32, mem string, pending ...virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstance {
		v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: before},
			Spec:   virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{CPU: &virtv1.CPU{Sockets: sockets}, Memory: &virtv1.Memory{Guest: q(mem)}}},
			Status: virtv1.VirtualMachineInstanceStatus{CurrentCPUTopology: &virtv1.CPUTopology{Sockets: sockets}, Memory: &virtv1.MemoryStatus{GuestCurrent: q(mem)}}}
		v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}}
		for _, c := range pending {
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: c, Status: corev1.ConditionTrue})
		}
		return v
	}
	// migrated is v after a migration handed off after the move: started
	// at start, and ended at end unless end is zero, failed if said.
	migrated := func(v *virtv1.VirtualMachineInstance, start, end time.Time, failed bool) *virtv1.VirtualMachineInstance {
		s := &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m2", SourceNode: "n1", TargetNode: "n2", Failed: failed}
		if !start.IsZero() {
			at := metav1.NewTime(start)
			s.StartTimestamp = &at
		}
		if !end.IsZero() {
			at := metav1.NewTime(end)
			s.EndTimestamp, s.Completed = &at, true
		}
		if failed {
			s.FailureReason = "the migration did not converge"
		}
		v.Status.MigrationState = s
		return v
	}
	unmigratable := func(v *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
		v.Status.Conditions[0].Status = corev1.ConditionFalse
		return v
	}
	// movedEarlier is o found already moved by an earlier attempt, whose
	// plan was stored five minutes before this outcome.
	movedEarlier := func(o events.Outcome) events.Outcome {
		o.MovedAfter = moved.Add(-5 * time.Minute)
		return o
	}
	queueOut := func(r events.Result, changes ...events.Change) events.Outcome {
		o := out(r, changes...)
		o.QueueDeadline = time.Hour
		return o
	}
	migStart, migEnd, afterMig := moved.Add(20*time.Minute), moved.Add(21*time.Minute), moved.Add(20*time.Minute+deadline)
	booted := vmi(4, "2Gi")
	booted.CreationTimestamp = metav1.NewTime(moved.Add(30 * time.Second))
	// Created a moment before the move: its creation second is the move's
	// (or the one before), which says nothing of a boot after it.
	justBefore := vmi(4, "2Gi")
	justBefore.CreationTimestamp = metav1.NewTime(moved.Add(-time.Second))
	sameSecond := vmi(4, "2Gi")
	sameSecond.CreationTimestamp = metav1.NewTime(moved)
	migrating := vmi(2, "2Gi")
	migrating.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m1"}
	recreated := vm("vm-new")
	recreated.UID = "u2"
	tests := []struct {
		name  string
		o     events.Outcome
		vm    *virtv1.VirtualMachine
		vmi   *virtv1.VirtualMachineInstance
		now   time.Time
		want  events.Observed
		final bool
	}{
		{"live, hot-plugged by a migration", out(events.ResultLive, sockets), vm("vm-new"), migrated(vmi(4, "2Gi"), early, early, false), early, events.ObservedLive, true},
		{"live, the VMI at the new values with no migration since the move: not live", out(events.ResultLive, sockets), vm("vm-new"), vmi(4, "2Gi"), early, "", false},
		{"live, the VMI at the new values with no migration since the move, at the deadline", out(events.ResultLive, sockets), vm("vm-new"), vmi(4, "2Gi"), late, events.ObservedNotObserved, true},
		{"live, moved by an earlier attempt whose migration ended before this outcome", movedEarlier(out(events.ResultLive, sockets)), vm("vm-new"), migrated(vmi(4, "2Gi"), moved.Add(-time.Minute), moved.Add(-30*time.Second), false), early, events.ObservedLive, true},
		{"live, queued for its migration: not due at the verdict deadline", queueOut(events.ResultLive, sockets), vm("vm-new"), vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), late, "", false},
		{"live, queued for its migration at the queue deadline", queueOut(events.ResultLive, sockets), vm("vm-new"), vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), moved.Add(time.Hour), events.ObservedQueued, true},
		{"live, its migration started late: the deadline runs from its start", queueOut(events.ResultLive, sockets), vm("vm-new"), migrated(vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), migStart, time.Time{}, false), migStart.Add(time.Minute), "", false},
		{"live, its migration still running a deadline after its start", queueOut(events.ResultLive, sockets), vm("vm-new"), migrated(vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), migStart, time.Time{}, false), afterMig, events.ObservedPending, true},
		{"live, a migration that started before the move is not this move's", out(events.ResultLive, sockets), vm("vm-new"), migrated(vmi(4, "2Gi"), moved.Add(-5*time.Second), early, false), early, "", false},
		{"live, its late migration ended", queueOut(events.ResultLive, sockets), vm("vm-new"), migrated(vmi(4, "2Gi"), migStart, migEnd, false), migEnd, events.ObservedLive, true},
		{"live, its migration failed: queued again for the next", queueOut(events.ResultLive, sockets), vm("vm-new"), migrated(vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), migStart, migEnd, true), afterMig, "", false},
		{"live, on a VMI that cannot migrate: waits for a restart", out(events.ResultLive, sockets), vm("vm-new"), unmigratable(vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange)), late, events.ObservedRestart, true},
		{"restart predicted for a hot-plug no migration carries", out(events.ResultRestart, sockets), vm("vm-new"), vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), late, events.ObservedRestart, true},
		{"live, not yet", out(events.ResultLive, sockets), vm("vm-new"), vmi(2, "2Gi"), early, "", false},
		{"live, the cache has not seen the move", out(events.ResultLive, sockets), vm("vm-old"), vmi(4, "2Gi"), early, "", false},
		{"live, waiting for its migration at the deadline, no queue deadline", out(events.ResultLive, sockets), vm("vm-new"), vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), late, events.ObservedQueued, true},
		{"live, migration under way at the deadline", out(events.ResultLive, sockets), vm("vm-new"), migrating, late, events.ObservedPending, true},
		{"live, refused, KubeVirt retries", out(events.ResultLive, sockets), vm("vm-new", cond(virtv1.VirtualMachineFailure, "HotPlugCPUError", metav1.NewTime(early))), vmi(2, "2Gi"), early, "", false},
		{"live, refused at the deadline", out(events.ResultLive, sockets), vm("vm-new", cond(virtv1.VirtualMachineFailure, "HotPlugCPUError", metav1.NewTime(early))), vmi(2, "2Gi"), late, events.ObservedRefused, true},
		{"live, its hotplug under way while a later move's is refused: pending", out(events.ResultLive, sockets), vm("vm-new", cond(virtv1.VirtualMachineFailure, "HotPlugCPUError", metav1.NewTime(early))), migrated(vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), moved, time.Time{}, false), late, events.ObservedPending, true},
		{"live, refused while another hotplug is under way: refused", out(events.ResultLive, events.Change{Field: "cpu.sockets", From: "4", To: "6", Class: "live"}), vm("vm-new", cond(virtv1.VirtualMachineFailure, "HotPlugCPUError", metav1.NewTime(early))), vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), late, events.ObservedRefused, true},
		{"live, KubeVirt wants a restart", out(events.ResultLive, sockets), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", metav1.NewTime(early))), vmi(2, "2Gi"), early, events.ObservedRestart, true},
		{"live, a RestartRequired older than the move does not count", out(events.ResultLive, sockets), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", before)), migrated(vmi(4, "2Gi"), early, early, false), early, events.ObservedLive, true},
		{"live, nothing to hot-plug, a RestartRequired older than the move still stands at the deadline", out(events.ResultLive), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", before)), vmi(2, "2Gi"), late, events.ObservedRestart, true},
		{"live, nothing to hot-plug, a RestartRequired older than the move may yet go", out(events.ResultLive), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", before)), vmi(2, "2Gi"), early, "", false},
		{"live, not hot-plugged, a RestartRequired older than the move still stands at the deadline", out(events.ResultLive, sockets), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", before)), vmi(2, "2Gi"), late, events.ObservedRestart, true},
		{"live, nothing ever showed", out(events.ResultLive, sockets), vm("vm-new"), vmi(2, "2Gi"), late, events.ObservedNotObserved, true},
		{"live, nothing to hot-plug, before the deadline", out(events.ResultLive), vm("vm-new"), vmi(2, "2Gi"), early, "", false},
		{"live, nothing to hot-plug, at the deadline", out(events.ResultLive), vm("vm-new"), vmi(2, "2Gi"), late, events.ObservedLive, true},
		{"restart, flagged", out(events.ResultRestart, model), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", metav1.NewTime(early))), vmi(2, "2Gi"), early, events.ObservedRestart, true},
		{"restart, flagged before the move: virt-controller may yet clear it", out(events.ResultRestart, model), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", before)), vmi(2, "2Gi"), early, "", false},
		{"restart, flagged before the move and still at the deadline", out(events.ResultRestart, model), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", before)), vmi(2, "2Gi"), late, events.ObservedRestart, true},
		{"restart predicted, no RestartRequired (any more) at the deadline", out(events.ResultRestart, model), vm("vm-new"), vmi(2, "2Gi"), late, events.ObservedNotObserved, true},
		{"restart predicted, KubeVirt hot-plugged it", out(events.ResultRestart, memRestart), vm("vm-new"), migrated(vmi(2, "4Gi"), early, early, false), early, events.ObservedLive, true},
		{"evict predicted, evicted and started again", out(events.ResultEvict, sockets), vm("vm-new"), booted, early, events.ObservedEvicted, true},
		{"evict predicted, evicted and stopped", out(events.ResultEvict, sockets), vm("vm-new"), nil, early, events.ObservedEvicted, true},
		{"evict predicted, waiting for the eviction", queueOut(events.ResultEvict, sockets), vm("vm-new"), vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), late, "", false},
		{"evict predicted, not evicted by the queue deadline", queueOut(events.ResultEvict, sockets), vm("vm-new"), vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), moved.Add(time.Hour), events.ObservedQueued, true},
		{"evict predicted, RestartRequired for memory: the eviction still decides", queueOut(events.ResultEvict, sockets), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", metav1.NewTime(early))),
			vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), late, "", false},
		{"evict predicted, RestartRequired, evicted", out(events.ResultEvict, sockets), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", metav1.NewTime(early))), booted, early, events.ObservedEvicted, true},
		{"evict predicted, RestartRequired, not evicted by the queue deadline", queueOut(events.ResultEvict, sockets), vm("vm-new", cond(virtv1.VirtualMachineRestartRequired, "", metav1.NewTime(early))),
			vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), moved.Add(time.Hour), events.ObservedRestart, true},
		{"restart, nothing by the deadline", out(events.ResultRestart, model), vm("vm-new"), vmi(2, "2Gi"), late, events.ObservedNotObserved, true},
		{"next boot, stopped", out(events.ResultNextBoot, sockets), vm("vm-new"), nil, early, events.ObservedNextBoot, true},
		{"booted after the move", out(events.ResultNextBoot, sockets), vm("vm-new"), booted, early, events.ObservedNextBoot, true},
		{"a VMI created the second before the move did not boot after it", out(events.ResultLive, sockets), vm("vm-new"), migrated(justBefore, early, early, false), early, events.ObservedLive, true},
		{"a VMI created in the move's second did not boot after it", out(events.ResultLive, sockets), vm("vm-new"), migrated(sameSecond, early, early, false), early, events.ObservedLive, true},
		{"deleted", out(events.ResultLive, sockets), nil, nil, early, events.ObservedNotObserved, true},
		{"re-created", out(events.ResultLive, sockets), recreated, nil, early, events.ObservedNotObserved, true},
		{"moved on to a later pin by the deadline, its hotplug under way", out(events.ResultLive, sockets), vm("vm-later"), migrated(vmi(4, "2Gi", virtv1.VirtualMachineInstanceVCPUChange), moved, time.Time{}, false), late, events.ObservedPending, true},
		{"the move never showed by the deadline", out(events.ResultLive, sockets), vm("vm-old"), vmi(2, "2Gi"), late, events.ObservedNotObserved, true},
	}
	for _, tt := range tests {
		j, final := Judge(tt.o, tt.vm, tt.vmi, tt.now, deadline)
		if j.Observed != tt.want || final != tt.final {
			t.Errorf("%s: %q (final %v, %q), want %q (final %v)", tt.name, j.Observed, final, j.Reason, tt.want, tt.final)
		}
		if final && j.Reason == "" {
			t.Errorf("%s: a verdict without a reason", tt.name)
		}
	}
}

// TestJudgeASwitch: a switch's verdict is read only once the VM references
// what it was switched to. A VM the cache has not seen switched waits; at
// the deadline, one switched back (by a GitOps tool's server-side apply)
// is not observed, naming what it references and who manages that; a VM
// that references the target is judged as any moved VM.
func TestJudgeASwitch(t *testing.T) {
	moved := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const deadline = 2 * time.Minute
	large := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}
	o := func(r events.Result) events.Outcome {
		return events.Outcome{EventID: "switch/1", VM: events.VMRef{Namespace: "ns", Name: "vm", UID: "u1"}, Result: r, SwitchedTo: &large, FinishedAt: moved}
	}
	vm := func(it string) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "u1"},
			Spec: virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: it}}}
	}
	back := vm("u1.small")
	back.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "argocd-controller", Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:instancetype":{"f:name":{}}}}`)}}}
	lagging := vm("u1.large")
	lagging.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: "u1.small"}
	running := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(moved.Add(-time.Hour))},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running}}
	for _, tc := range []struct {
		name   string
		o      events.Outcome
		vm     *virtv1.VirtualMachine
		vmi    *virtv1.VirtualMachineInstance
		at     time.Time
		final  bool
		want   events.Observed
		reason []string
	}{
		{"stopped, switched back, before the deadline", o(events.ResultNextBoot), back, nil, moved.Add(time.Second), false, "", nil},
		{"stopped, switched back, at the deadline", o(events.ResultNextBoot), back, nil, moved.Add(deadline), true, events.ObservedNotObserved,
			[]string{"references clusterinstancetype/u1.small, not clusterinstancetype/u1.large", "argocd-controller"}},
		{"running, nothing to hot-plug, switched back", o(events.ResultLive), back, running, moved.Add(deadline), true, events.ObservedNotObserved,
			[]string{"switched back or elsewhere"}},
		{"switched, virt-controller not caught up", o(events.ResultNextBoot), lagging, nil, moved.Add(deadline), true, events.ObservedNotObserved,
			[]string{"had not taken the switch up"}},
		{"stopped and switched", o(events.ResultNextBoot), vm("u1.large"), nil, moved.Add(time.Second), true, events.ObservedNextBoot, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, final := Judge(tc.o, tc.vm, tc.vmi, tc.at, deadline)
			if final != tc.final || j.Observed != tc.want {
				t.Fatalf("Judge = %s (%q), final %t; want %q, final %t", j.Observed, j.Reason, final, tc.want, tc.final)
			}
			for _, r := range tc.reason {
				if !strings.Contains(j.Reason, r) {
					t.Errorf("reason %q; want it to say %q", j.Reason, r)
				}
			}
		})
	}
}
