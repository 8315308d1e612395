package instancetype

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// TestJudgeRestart reads KubeVirt's verdict on a restart: restarted only
// once a VMI other than the one stopped runs with the new sockets and
// memory and RestartRequired is gone; before that nothing is final until
// the deadline, which says what stood.
func TestJudgeRestart(t *testing.T) {
	moved := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	const deadline = 2 * time.Minute
	early, late := moved.Add(10*time.Second), moved.Add(deadline)
	o := events.Outcome{EventID: "restart/x", VM: events.VMRef{Namespace: "ns", Name: "vm", UID: "u1"}, Result: events.ResultRestart,
		Stopped: "old", FinishedAt: moved, Changes: []events.Change{
			{Field: "cpu.sockets", From: "2", To: "3", Class: ClassRestart}, {Field: "memory.guest", From: "4Gi", To: "6Gi", Class: ClassRestart}}}
	vm := func(flagged bool, requests ...virtv1.VirtualMachineStateChangeRequest) *virtv1.VirtualMachine {
		v := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "u1"}}
		if flagged {
			v.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue, Reason: "r"}}
		}
		v.Status.StateChangeRequests = requests
		return v
	}
	vmi := func(uid string, phase virtv1.VirtualMachineInstancePhase, sockets uint32, mem string) *virtv1.VirtualMachineInstance {
		q := resource.MustParse(mem)
		return &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)},
			Spec:   virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{CPU: &virtv1.CPU{Sockets: sockets}, Memory: &virtv1.Memory{Guest: &q}}},
			Status: virtv1.VirtualMachineInstanceStatus{Phase: phase}}
	}
	start := virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest}
	tests := []struct {
		name  string
		vm    *virtv1.VirtualMachine
		vmi   *virtv1.VirtualMachineInstance
		now   time.Time
		want  events.Observed
		final bool
		why   string
	}{
		{"the old VMI still runs", vm(true), vmi("old", virtv1.Running, 2, "4Gi"), early, "", false, ""},
		{"the new VMI runs the pin", vm(false), vmi("new", virtv1.Running, 3, "6Gi"), early, events.ObservedRestarted, true, "new VMI runs"},
		{"the new VMI is scheduled", vm(false), vmi("new", virtv1.Scheduled, 3, "6Gi"), early, "", false, ""},
		{"at the deadline, the old VMI runs", vm(true), vmi("old", virtv1.Running, 2, "4Gi"), late, events.ObservedPending, true, "still runs"},
		{"at the deadline, between the two", vm(true, start), nil, late, events.ObservedPending, true, "not started"},
		{"at the deadline, stopped", vm(false), nil, late, events.ObservedNotObserved, true, "was stopped"},
		{"at the deadline, flagged again", vm(true), vmi("new", virtv1.Running, 3, "6Gi"), late, events.ObservedRestart, true, "still stands"},
		{"at the deadline, the old shape", vm(false), vmi("new", virtv1.Running, 2, "4Gi"), late, events.ObservedNotObserved, true, "not with the sockets"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, final := Judge(o, tc.vm, tc.vmi, tc.now, deadline)
			if final != tc.final || j.Observed != tc.want || !strings.Contains(j.Reason, tc.why) {
				t.Errorf("Judge = %s (%q), final %t; want %s saying %q, final %t", j.Observed, j.Reason, final, tc.want, tc.why, tc.final)
			}
			if tc.final && j.Observed == events.ObservedRestarted && !j.Observed.Matches(o.Result) {
				t.Errorf("restarted does not match the restart predicted")
			}
		})
	}
	if why := InPlannedState(o, vm(false), vmi("new", virtv1.Running, 3, "6Gi")); why != "" {
		t.Errorf("InPlannedState of a restarted VM: %q, want none", why)
	}
	if why := InPlannedState(o, vm(true), vmi("old", virtv1.Running, 2, "4Gi")); why == "" {
		t.Errorf("InPlannedState of a VM not restarted yet: none, want a reason")
	}
}
