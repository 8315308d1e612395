package instancetype

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// TestInPlannedState reads a VM and its VMI the way KubeVirt leaves them
// after each kind of move.
func TestInPlannedState(t *testing.T) {
	live := events.Outcome{VM: events.VMRef{Namespace: "ns", Name: "vm", UID: "u1"}, Result: events.ResultLive,
		Changes: []events.Change{{Field: "cpu.sockets", From: "2", To: "4", Class: "live"}, {Field: "memory.guest", From: "2Gi", To: "4Gi", Class: "live"}}}
	restart, nextBoot := live, live
	restart.Result, nextBoot.Result, nextBoot.Revision = events.ResultRestart, events.ResultNextBoot, "vm-new-rev"
	vm := func(conds ...virtv1.VirtualMachineCondition) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "u1"},
			Spec:   virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: "it", RevisionName: "vm-old-rev"}},
			Status: virtv1.VirtualMachineStatus{Conditions: conds}}
	}
	moved := vm()
	moved.Spec.Instancetype.RevisionName = "vm-new-rev"
	recreated := vm()
	recreated.UID = "u2"
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	vmi := func(sockets uint32, mem string, conds ...virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstance {
		v := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{
			CPU: &virtv1.CPU{Sockets: sockets}, Memory: &virtv1.Memory{Guest: q(mem)}}},
			Status: virtv1.VirtualMachineInstanceStatus{CurrentCPUTopology: &virtv1.CPUTopology{Sockets: sockets}, Memory: &virtv1.MemoryStatus{GuestCurrent: q(mem)}}}
		for _, c := range conds {
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: c, Status: corev1.ConditionTrue})
		}
		return v
	}
	lagging := vmi(4, "4Gi")
	lagging.Status.CurrentCPUTopology.Sockets = 2
	refused := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: "HotPlugCPUError"}
	restartRequired := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}
	movedAt := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	liveAt := live
	liveAt.FinishedAt = movedAt
	flaggedAfter := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue,
		Reason: "NonLiveUpdatableFieldChanged", LastTransitionTime: metav1.NewTime(movedAt.Add(5 * time.Second))}
	flaggedBefore := flaggedAfter
	flaggedBefore.LastTransitionTime = metav1.NewTime(movedAt.Add(-time.Hour))
	large := events.Ref{Kind: events.KindClusterInstancetype, Name: "large"}
	switched := nextBoot
	switched.Revision, switched.SwitchedTo = "", &large
	tests := []struct {
		name string
		o    events.Outcome
		vm   *virtv1.VirtualMachine
		vmi  *virtv1.VirtualMachineInstance
		want string
	}{
		{"live, hot-plugged", live, vm(), vmi(4, "4Gi"), ""},
		{"live, not asked for yet", live, vm(), vmi(2, "2Gi"), "the VMI does not show the new sockets and memory yet"},
		{"live, hotplug under way", live, vm(), vmi(4, "4Gi", virtv1.VirtualMachineInstanceVCPUChange), "hotplug pending (HotVCPUChange)"},
		{"live, status lags the spec", live, vm(), lagging, "the VMI does not show the new sockets and memory yet"},
		{"live, refused", live, vm(refused), vmi(4, "4Gi"), "hotplug refused (HotPlugCPUError)"},
		{"live, no VMI", live, vm(), nil, "no VMI"},
		{"restart, flagged", restart, vm(restartRequired), nil, ""},
		{"restart, not flagged", restart, vm(), nil, "RestartRequired not set"},
		{"next boot, pin moved", nextBoot, moved, nil, ""},
		{"next boot, pin not moved", nextBoot, vm(), nil, "the pin has not moved to vm-new-rev"},
		{"live, hot-plugged, but KubeVirt flagged RestartRequired since the move", liveAt, vm(flaggedAfter), vmi(4, "4Gi"), "KubeVirt set RestartRequired (NonLiveUpdatableFieldChanged)"},
		{"live, hot-plugged, RestartRequired from before the move", liveAt, vm(flaggedBefore), vmi(4, "4Gi"), ""},
		{"switched, the VM references another", switched, vm(), nil, "the VM does not reference clusterinstancetype/large (yet)"},
		{"deleted", live, nil, nil, ""},
		{"re-created", live, recreated, nil, ""},
	}
	for _, tt := range tests {
		if got := InPlannedState(tt.o, tt.vm, tt.vmi); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
