package instancetype

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// TestJudgeReadsOnlyKubeVirtsAnswerToTheMove: a RestartRequired (or a
// refused hotplug, or a migration) that stood when the move's write
// landed is not KubeVirt's answer to the move, however close its time is
// to the move's: kvlive waits for virt-controller's look (the condition
// gone, rewritten, set, or status.desiredGeneration at the write's
// generation) and, when none shows by the deadline, says the condition
// stood unchanged. Issue 63: a live change moved 3 ms after an earlier
// change's RestartRequired was stored as restart.
func TestJudgeReadsOnlyKubeVirtsAnswerToTheMove(t *testing.T) {
	moved := time.Date(2026, 12, 1, 10, 0, 0, 300_000_000, time.UTC)
	const deadline = 2 * time.Minute
	// The earlier change's condition, set in the move's second (KubeVirt's
	// times are whole seconds).
	sameSecond := metav1.NewTime(moved.Truncate(time.Second))
	later := metav1.NewTime(moved.Add(2 * time.Second).Truncate(time.Second))
	early, late := moved.Add(5*time.Second), moved.Add(deadline)
	rr := func(at metav1.Time, msg string) virtv1.VirtualMachineCondition {
		return virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue, Message: msg, LastTransitionTime: at}
	}
	refused := func(at metav1.Time) virtv1.VirtualMachineCondition {
		return virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: "HotPlugCPUError", Message: "another CPU hotplug is in progress", LastTransitionTime: at}
	}
	vm := func(desired int64, conds ...virtv1.VirtualMachineCondition) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "u1", Generation: 7},
			Spec: virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: "it"}},
			Status: virtv1.VirtualMachineStatus{DesiredGeneration: desired, Conditions: conds,
				InstancetypeRef: &virtv1.InstancetypeStatusRef{ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: "vm-new"}}}}
	}
	sockets := events.Change{Field: "cpu.sockets", From: "8", To: "4", Class: "live"}
	mem := resource.MustParse("2Gi")
	vmi := func(sockets uint32, migration string, start, end time.Time) *virtv1.VirtualMachineInstance {
		v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(moved.Add(-time.Hour))},
			Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{CPU: &virtv1.CPU{Sockets: sockets}, Memory: &virtv1.Memory{Guest: &mem}}},
			Status: virtv1.VirtualMachineInstanceStatus{CurrentCPUTopology: &virtv1.CPUTopology{Sockets: sockets}, Memory: &virtv1.MemoryStatus{GuestCurrent: &mem},
				Conditions: []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}}}}
		if migration != "" {
			s, e := metav1.NewTime(start), metav1.NewTime(end)
			v.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: k8stypes.UID("m-" + migration), TargetNode: "n2",
				StartTimestamp: &s, EndTimestamp: &e, Completed: true}
		}
		return v
	}
	// out is a live move whose write left the VM showing conds (specWrite:
	// generation 7 in its spec), with the VMI showing migration then.
	out := func(specWrite bool, migration string, conds ...virtv1.VirtualMachineCondition) events.Outcome {
		at := vm(0, conds...)
		var running *virtv1.VirtualMachineInstance
		if migration != "" {
			running = vmi(4, migration, moved, moved)
		}
		return events.Outcome{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "vm", UID: "u1"}, Result: events.ResultLive,
			Revision: "vm-new", Changes: []events.Change{sockets}, FinishedAt: moved, AtMove: AtMove(at, running, specWrite)}
	}
	earlier := rr(sameSecond, "CPU sockets updated in template spec to a value higher than what's available")
	migratedAfter := vmi(4, "after", moved.Add(time.Second), moved.Add(3*time.Second))
	for _, tc := range []struct {
		name  string
		o     events.Outcome
		vm    *virtv1.VirtualMachine
		vmi   *virtv1.VirtualMachineInstance
		now   time.Time
		want  events.Observed
		final bool
		says  string
	}{
		{"the earlier change's RestartRequired, in the move's second: not yet an answer", out(false, "", earlier), vm(0, earlier), vmi(8, "", time.Time{}, time.Time{}), moved.Add(3 * time.Millisecond), "", false, ""},
		{"then virt-controller cleared it and a migration carried the change", out(false, "", earlier), vm(0), migratedAfter, early, events.ObservedLive, true, "migration m-after"},
		{"cleared, the migration carrying it not yet ended", out(false, "", earlier), vm(0), vmi(8, "", time.Time{}, time.Time{}), early, "", false, ""},
		{"the earlier RestartRequired, unchanged at the deadline", out(false, "", earlier), vm(0, earlier), vmi(8, "", time.Time{}, time.Time{}), late, events.ObservedRestart, true, "unchanged at the deadline"},
		{"rewritten by a later sync (a new transition time)", out(false, "", earlier), vm(0, rr(later, earlier.Message)), vmi(8, "", time.Time{}, time.Time{}), early, events.ObservedRestart, true, "KubeVirt set RestartRequired"},
		{"rewritten with another message", out(false, "", earlier), vm(0, rr(sameSecond, "memory updated in template spec to a value lower than what the VM started with")), vmi(8, "", time.Time{}, time.Time{}), early, events.ObservedRestart, true, "KubeVirt set RestartRequired"},
		{"none when moved, set after", out(false, ""), vm(0, rr(sameSecond, "a non-live-updatable field was changed in the template spec")), vmi(8, "", time.Time{}, time.Time{}), early, events.ObservedRestart, true, "KubeVirt set RestartRequired"},
		{"a spec write, virt-controller not yet at its generation", out(true, "", earlier), vm(6, earlier), vmi(8, "", time.Time{}, time.Time{}), early, "", false, ""},
		{"a spec write virt-controller synced and kept RestartRequired for", out(true, "", earlier), vm(7, earlier), vmi(8, "", time.Time{}, time.Time{}), early, events.ObservedRestart, true, "kept RestartRequired"},
		{"a refusal that stood when moved is not this move's", out(false, "", refused(sameSecond)), vm(0, refused(sameSecond)), vmi(8, "", time.Time{}, time.Time{}), late, events.ObservedNotObserved, true, "did not put the new sockets"},
		{"a refusal rewritten after the move is", out(false, "", refused(sameSecond)), vm(0, refused(later)), vmi(8, "", time.Time{}, time.Time{}), late, events.ObservedRefused, true, "refused"},
		{"the migration the VMI showed when moved carries none of the move's change", out(false, "before"), vm(0), vmi(4, "before", moved, moved.Add(time.Second)), early, "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, final := Judge(tc.o, tc.vm, tc.vmi, tc.now, deadline)
			if j.Observed != tc.want || final != tc.final {
				t.Fatalf("Judge = %q (%q), final %t; want %q, final %t", j.Observed, j.Reason, final, tc.want, tc.final)
			}
			if !strings.Contains(j.Reason, tc.says) {
				t.Errorf("reason %q; want it to say %q", j.Reason, tc.says)
			}
		})
	}
}
