package applier

import (
	"strings"
	"testing"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/rollout"
)

// gateFleet serves VMs and VMIs from maps; the gate reads nothing else.
type gateFleet struct {
	Fleet
	vms  map[string]*virtv1.VirtualMachine
	vmis map[string]*virtv1.VirtualMachineInstance
}

func (f gateFleet) VM(ns, name string) *virtv1.VirtualMachine { return f.vms[ns+"/"+name] }
func (f gateFleet) VMI(ns, name string) *virtv1.VirtualMachineInstance {
	return f.vmis[ns+"/"+name]
}

var liveChanges = []events.Change{
	{Field: "cpu.sockets", From: "2", To: "3", Class: "live"},
	{Field: "memory.guest", From: "4Gi", To: "6Gi", Class: "live"},
}

func gateVM(name string, conditions ...virtv1.VirtualMachineCondition) *virtv1.VirtualMachine {
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	vm.Status.Conditions = conditions
	vm.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: "rev-" + name}}
	return vm
}

func gateVMI(sockets uint32, memory string, pending ...virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstance {
	q := resource.MustParse(memory)
	vmi := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{
		CPU: &virtv1.CPU{Sockets: sockets}, Memory: &virtv1.Memory{Guest: &q}}}}
	vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: sockets}
	vmi.Status.Memory = &virtv1.MemoryStatus{GuestCurrent: &q}
	for _, c := range pending {
		vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: c, Status: k8scorev1.ConditionTrue})
	}
	return vmi
}

func outcome(name string, batch int, result events.Result) events.Outcome {
	o := events.Outcome{VM: events.VMRef{Namespace: "ns", Name: name, UID: "uid-" + name}, Batch: batch, Result: result, Wrote: true}
	switch result {
	case events.ResultLive:
		o.Changes = liveChanges
	case events.ResultNextBoot:
		o.Revision = "rev-" + name
	}
	return o
}

// TestGate: a batch's gate passes only once every VM of it has an outcome
// and is in its planned state as KubeVirt reports it, and fails past the
// policy's failure threshold.
func TestGate(t *testing.T) {
	restartRequired := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineRestartRequired, Status: k8scorev1.ConditionTrue}
	hotplugRefused := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineFailure, Status: k8scorev1.ConditionTrue, Reason: "HotPlugCPUError"}
	moved := gateVM("stopped")
	notMoved := gateVM("stale")
	notMoved.Status.InstancetypeRef.ControllerRevisionRef.Name = "rev-old"
	for _, tt := range []struct {
		name     string
		policy   events.Policy
		batch    int
		outcomes []events.Outcome
		vms      []*virtv1.VirtualMachine
		vmis     map[string]*virtv1.VirtualMachineInstance
		verdict  int
		why      string
	}{
		{name: "waits for every outcome", batch: 1, outcomes: []events.Outcome{outcome("a", 1, events.ResultLive)},
			vms: []*virtv1.VirtualMachine{gateVM("a")}, vmis: map[string]*virtv1.VirtualMachineInstance{"ns/a": gateVMI(3, "6Gi")},
			verdict: gateWaiting, why: "1 of 2 VMs of the batch have an outcome"},
		{name: "live: passes once the VMI shows the new values", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultLive), outcome("b", 1, events.ResultLive)},
			vms:      []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": gateVMI(3, "6Gi"), "ns/b": gateVMI(3, "6Gi")},
			verdict:  gatePassed, why: "all 2 VMs in their planned state"},
		{name: "live: a pending hotplug holds the gate", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultLive), outcome("b", 1, events.ResultLive)},
			vms:      []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": gateVMI(3, "6Gi"), "ns/b": gateVMI(3, "6Gi", virtv1.VirtualMachineInstanceVCPUChange)},
			verdict:  gateWaiting, why: "ns/b: hotplug pending (HotVCPUChange)"},
		{name: "live: a refused hotplug holds the gate", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultLive), outcome("b", 1, events.ResultLive)},
			vms:      []*virtv1.VirtualMachine{gateVM("a"), gateVM("b", hotplugRefused)},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": gateVMI(3, "6Gi"), "ns/b": gateVMI(3, "6Gi")},
			verdict:  gateWaiting, why: "ns/b: hotplug refused (HotPlugCPUError)"},
		{name: "live: old values on the VMI hold the gate", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultLive), outcome("b", 1, events.ResultLive)},
			vms:      []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": gateVMI(3, "6Gi"), "ns/b": gateVMI(2, "4Gi")},
			verdict:  gateWaiting, why: "ns/b: the VMI does not show the new sockets and memory yet"},
		{name: "restart: RestartRequired must be set", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultRestart), outcome("b", 1, events.ResultRestart)},
			vms:      []*virtv1.VirtualMachine{gateVM("a", restartRequired), gateVM("b")},
			verdict:  gateWaiting, why: "ns/b: RestartRequired not set"},
		{name: "next-boot: the pin must have moved", batch: 1,
			outcomes: []events.Outcome{outcome("stopped", 1, events.ResultNextBoot), outcome("stale", 1, events.ResultNextBoot)},
			vms:      []*virtv1.VirtualMachine{moved, notMoved},
			verdict:  gateWaiting, why: "ns/stale: the pin has not moved to rev-stale"},
		{name: "a deleted VM has nothing left to check", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultRestart), outcome("gone", 1, events.ResultLive)},
			vms:      []*virtv1.VirtualMachine{gateVM("a", restartRequired)},
			verdict:  gatePassed},
		{name: "the first batch counts the plans that move nothing", batch: 0,
			outcomes: []events.Outcome{outcome("a", 0, events.ResultRestart), outcome("n", 0, events.ResultNone)},
			vms:      []*virtv1.VirtualMachine{gateVM("a", restartRequired)},
			verdict:  gateWaiting, why: "2 of 3 VMs of the batch have an outcome"},
		{name: "a failure past the threshold fails the gate", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultFailed), outcome("b", 0, events.ResultFailed)},
			policy:   events.Policy{FailureThreshold: "1"},
			verdict:  gateFailed, why: "2 VMs failed, the policy tolerates 1"},
		{name: "failures within the threshold do not", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultFailed), outcome("b", 1, events.ResultRestart)},
			policy:   events.Policy{FailureThreshold: "50%"}, vms: []*virtv1.VirtualMachine{gateVM("b", restartRequired)},
			verdict: gatePassed, why: "1 failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := gateFleet{vms: map[string]*virtv1.VirtualMachine{}, vmis: tt.vmis}
			for _, vm := range tt.vms {
				f.vms["ns/"+vm.Name] = vm
			}
			a := &Applier{cfg: Config{Fleet: f}}
			acct := rollout.Account{Outcomes: map[events.Result]int{}, Latest: map[string]events.Outcome{}}
			for _, o := range tt.outcomes {
				acct.Latest[o.VM.UID] = o
				acct.Outcomes[o.Result]++
			}
			rec := events.Rollout{Planned: 4, Batches: []int{1, 2, 1}, Policy: tt.policy,
				Counts: map[events.Result]int{events.ResultNone: 1, events.ResultSkip: 1}}
			g := a.gate(rec, tt.batch, acct)
			if g.verdict != tt.verdict || !strings.Contains(g.why, tt.why) {
				t.Errorf("gate = %d %q, want %d %q", g.verdict, g.why, tt.verdict, tt.why)
			}
		})
	}
}
