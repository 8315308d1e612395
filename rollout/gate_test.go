package rollout

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// gateFleet serves VMs and VMIs from maps; the gate reads nothing else.
type gateFleet struct {
	vms  map[string]*virtv1.VirtualMachine
	vmis map[string]*virtv1.VirtualMachineInstance
}

func (f gateFleet) VM(ns, name string) *virtv1.VirtualMachine { return f.vms[ns+"/"+name] }
func (f gateFleet) VMI(ns, name string) *virtv1.VirtualMachineInstance {
	return f.vmis[ns+"/"+name]
}
func (f gateFleet) Object(events.Ref) any { return nil }

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
	restarted := func(name, stopped string, batch int) events.Outcome {
		o := outcome(name, batch, events.ResultRestart)
		o.Stopped = stopped
		return o
	}
	vmiOf := func(uid string, phase virtv1.VirtualMachineInstancePhase) *virtv1.VirtualMachineInstance {
		vmi := gateVMI(3, "6Gi")
		vmi.UID, vmi.Status.Phase = types.UID(uid), phase
		return vmi
	}
	notMoved := gateVM("stale")
	notMoved.Status.InstancetypeRef.ControllerRevisionRef.Name = "rev-old"
	for _, tt := range []struct {
		name     string
		policy   events.Policy
		batch    int
		outcomes []events.Outcome
		vms      []*virtv1.VirtualMachine
		vmis     map[string]*virtv1.VirtualMachineInstance
		resumed  time.Time
		dead     map[string]int
		// verdicts, when set, are KubeVirt's stored verdicts (the verifier
		// runs) by VM name; the cache is then not read.
		verdicts map[string]events.Observed
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
		{name: "a resume accepts the failures before it", batch: 1, resumed: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
			outcomes: []events.Outcome{outcome("a", 1, events.ResultFailed), outcome("b", 0, events.ResultFailed)},
			policy:   events.Policy{FailureThreshold: "1"}, verdict: gateWaiting, why: "1 of 2 VMs"},
		{name: "a tolerated dead letter settles its batch", batch: 1,
			outcomes: []events.Outcome{outcome("b", 1, events.ResultRestart)}, dead: map[string]int{"a": 1},
			policy: events.Policy{FailureThreshold: "1"}, vms: []*virtv1.VirtualMachine{gateVM("b", restartRequired)},
			verdict: gatePassed},
		{name: "verdicts: the gate waits for each moved VM's", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultLive), outcome("b", 1, events.ResultLive)},
			verdicts: map[string]events.Observed{"a": events.ObservedLive},
			verdict:  gateWaiting, why: "ns/b: awaiting KubeVirt's verdict"},
		{name: "verdicts: passes once every one is as predicted", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultLive), outcome("b", 1, events.ResultRestart)},
			verdicts: map[string]events.Observed{"a": events.ObservedLive, "b": events.ObservedRestart},
			verdict:  gatePassed, why: "all 2 VMs with KubeVirt's verdict as predicted"},
		{name: "verdicts: a live VM KubeVirt flagged RestartRequired fails the gate", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultLive), outcome("b", 1, events.ResultLive)},
			vms:      []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": gateVMI(3, "6Gi"), "ns/b": gateVMI(3, "6Gi")},
			verdicts: map[string]events.Observed{"a": events.ObservedLive, "b": events.ObservedRestart},
			verdict:  gateFailed, why: "1 VMs failed, the policy tolerates 0; KubeVirt's verdict differs: ns/b: predicted live, KubeVirt: restart"},
		{name: "restart: a VM still shutting down holds the gate, whatever the threshold", batch: 1,
			outcomes: []events.Outcome{restarted("a", "old-a", 1), restarted("b", "old-b", 1)},
			policy:   events.Policy{FailureThreshold: "1"}, vms: []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": vmiOf("new-a", virtv1.Running), "ns/b": vmiOf("old-b", virtv1.Running)},
			verdicts: map[string]events.Observed{"a": events.ObservedRestarted, "b": events.ObservedPending},
			verdict:  gateWaiting, why: "1 VMs still restarting: ns/b: its old VMI is still shutting down"},
		{name: "restart: a new VMI not running yet holds it too", batch: 1,
			outcomes: []events.Outcome{restarted("a", "old-a", 1), restarted("b", "old-b", 1)},
			policy:   events.Policy{FailureThreshold: "1"}, vms: []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": vmiOf("new-a", virtv1.Running), "ns/b": vmiOf("new-b", virtv1.Scheduling)},
			verdicts: map[string]events.Observed{"a": events.ObservedRestarted, "b": events.ObservedPending},
			verdict:  gateWaiting, why: "ns/b: its new VMI is Scheduling, not running yet"},
		{name: "restart: once every VM is done restarting, the threshold decides", batch: 1,
			outcomes: []events.Outcome{restarted("a", "old-a", 1), restarted("b", "old-b", 1)},
			policy:   events.Policy{FailureThreshold: "1"}, vms: []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": vmiOf("new-a", virtv1.Running), "ns/b": vmiOf("new-b", virtv1.Running)},
			verdicts: map[string]events.Observed{"a": events.ObservedRestarted, "b": events.ObservedPending},
			verdict:  gatePassed, why: "1 failed"},
		{name: "evict: a VM KubeVirt has not evicted yet holds the gate, whatever the threshold", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultEvict), outcome("b", 1, events.ResultEvict)},
			policy:   events.Policy{FailureThreshold: "1"}, vms: []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": vmiOf("new-a", virtv1.Running), "ns/b": vmiOf("old-b", virtv1.Running)},
			verdicts: map[string]events.Observed{"a": events.ObservedEvicted, "b": events.ObservedQueued},
			verdict:  gateWaiting, why: "1 VMs still restarting: ns/b: KubeVirt has not evicted it yet"},
		{name: "evict: an evicted VM not running again holds it too", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultEvict), outcome("b", 1, events.ResultEvict)},
			vms:      []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": vmiOf("new-a", virtv1.Running), "ns/b": vmiOf("new-b", virtv1.Scheduled)},
			verdicts: map[string]events.Observed{"a": events.ObservedEvicted, "b": events.ObservedEvicted},
			verdict:  gateWaiting, why: "ns/b: evicted, its new VMI is Scheduled, not running yet"},
		{name: "evict: passes once every evicted VM runs again", batch: 1,
			outcomes: []events.Outcome{outcome("a", 1, events.ResultEvict), outcome("b", 1, events.ResultEvict)},
			vms:      []*virtv1.VirtualMachine{gateVM("a"), gateVM("b")},
			vmis:     map[string]*virtv1.VirtualMachineInstance{"ns/a": vmiOf("new-a", virtv1.Running), "ns/b": vmiOf("new-b", virtv1.Running)},
			verdicts: map[string]events.Observed{"a": events.ObservedEvicted, "b": events.ObservedEvicted},
			verdict:  gatePassed, why: "all 2 VMs with KubeVirt's verdict as predicted"},
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
			rc := &Controller{cfg: ControllerConfig{Fleet: f}}
			acct := Account{Outcomes: map[events.Result]int{}, Latest: map[string]events.Outcome{}, DeadBatch: tt.dead, DeadLetters: len(tt.dead)}
			for _, o := range tt.outcomes {
				acct.Latest[o.VM.UID] = o
				acct.Outcomes[o.Result]++
			}
			rec := events.Rollout{Planned: 4, Batches: []int{1, 2, 1}, Policy: tt.policy,
				Counts: map[events.Result]int{events.ResultNone: 1, events.ResultSkip: 1}}
			var verdicts map[string]events.Verdict
			if tt.verdicts != nil {
				verdicts = map[string]events.Verdict{}
				for name, v := range tt.verdicts {
					verdicts["uid-"+name] = events.Verdict{Observed: v, Reason: "test"}
				}
			}
			g := rc.gate(rec, tt.batch, acct, tt.resumed, verdicts)
			if g.verdict != tt.verdict || !strings.Contains(g.why, tt.why) {
				t.Errorf("gate = %d %q, want %d %q", g.verdict, g.why, tt.verdict, tt.why)
			}
		})
	}
}

// TestDecide walks the batch state machine: what a batched rollout does
// next, from its control record, staged batches, policy, gate and clock.
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rec := func(p events.Policy) events.Rollout {
		return events.Rollout{EventID: "E", Batches: []int{1, 4, 4}, Policy: p, PlannedAt: t0}
	}
	running := func(batch int, batchAt, gateAt time.Time) events.Control {
		return events.Control{State: events.StateRunning, Batch: batch, BatchAt: batchAt, GateAt: gateAt, At: t0}
	}
	passed := gateResult{gatePassed, "all 4 VMs in their planned state"}
	waiting := gateResult{gateWaiting, "2 of 4 VMs of the batch have an outcome"}
	for _, tt := range []struct {
		name   string
		c      events.Control
		staged []int
		policy events.Policy
		gate   gateResult
		now    time.Time
		want   gateStep
	}{
		{name: "aborted: send every staged batch to be skipped", c: events.Control{State: events.StateAborted},
			staged: []int{1, 2}, want: gateStep{kind: stepSend, batches: []int{1, 2}}},
		{name: "a released batch still staged is sent", c: running(1, t0, time.Time{}), staged: []int{1, 2},
			want: gateStep{kind: stepSend, batches: []int{1}}},
		{name: "a batch beyond the rollout's: refused, nothing released", c: running(5, t0, time.Time{}), staged: []int{1, 2},
			want: gateStep{kind: stepRefuse, why: "refused: the control record names batch 6, the rollout has 3"}},
		{name: "paused: nothing", c: events.Control{State: events.StatePaused}, staged: []int{1, 2}, gate: passed},
		{name: "the last batch released: nothing", c: running(2, t0, time.Time{}), staged: []int{3}, gate: passed},
		{name: "failed gate: trip", c: running(0, time.Time{}, time.Time{}), staged: []int{1, 2},
			gate: gateResult{gateFailed, "2 VMs failed, the policy tolerates 1"},
			want: gateStep{kind: stepTrip, result: "failed", why: "2 VMs failed, the policy tolerates 1"}},
		{name: "waiting within the deadline: note why", c: running(1, t0, time.Time{}), staged: []int{2}, gate: waiting,
			policy: events.Policy{ProgressDeadline: "5m"}, now: t0.Add(4 * time.Minute),
			want: gateStep{kind: stepNote, why: "waiting: 2 of 4 VMs of the batch have an outcome"}},
		{name: "waiting past the deadline: trip", c: running(1, t0, time.Time{}), staged: []int{2}, gate: waiting,
			policy: events.Policy{ProgressDeadline: "5m"}, now: t0.Add(6 * time.Minute),
			want: gateStep{kind: stepTrip, result: "deadline", why: "progress deadline 5m0s passed: 2 of 4 VMs of the batch have an outcome"}},
		{name: "a resume gives the batch its deadline again", staged: []int{2}, gate: waiting,
			c:    events.Control{State: events.StateRunning, Batch: 1, BatchAt: t0, By: "alice", At: t0.Add(time.Hour)},
			now:  t0.Add(time.Hour + 5*time.Minute),
			want: gateStep{kind: stepNote, why: "waiting: 2 of 4 VMs of the batch have an outcome"}},
		{name: "the first batch's deadline runs from planning; the default is 10m", c: running(0, time.Time{}, time.Time{}),
			staged: []int{1, 2}, gate: waiting, now: t0.Add(11 * time.Minute),
			want: gateStep{kind: stepTrip, result: "deadline", why: "progress deadline 10m0s passed: 2 of 4 VMs of the batch have an outcome"}},
		{name: "passed: record it", c: running(0, time.Time{}, time.Time{}), staged: []int{1, 2}, gate: passed, now: t0,
			want: gateStep{kind: stepPassGate, why: "all 4 VMs in their planned state"}},
		{name: "passed, no pause: release the next batch", c: running(0, time.Time{}, t0), staged: []int{1, 2}, gate: passed, now: t0,
			want: gateStep{kind: stepRelease, batches: []int{1}}},
		{name: "passed, pausing: wait", c: running(1, t0, t0.Add(time.Minute)), staged: []int{2}, gate: passed,
			policy: events.Policy{Pause: "2m"}, now: t0.Add(2 * time.Minute)},
		{name: "passed, pause over: release", c: running(1, t0, t0.Add(time.Minute)), staged: []int{2}, gate: passed,
			policy: events.Policy{Pause: "2m"}, now: t0.Add(3 * time.Minute), want: gateStep{kind: stepRelease, batches: []int{2}}},
		{name: "passed, manual: pause for promote", c: running(0, time.Time{}, t0), staged: []int{1, 2}, gate: passed,
			policy: events.Policy{Pause: events.PauseManual}, now: t0.Add(time.Hour),
			want: gateStep{kind: stepAwaitPromote, why: "batch 1 of 3 passed its gate; rollout promote (or resume) releases batch 2"}},
		{name: "passed, manual, resumed since: release", staged: []int{1, 2}, gate: passed, policy: events.Policy{Pause: events.PauseManual},
			c:    events.Control{State: events.StateRunning, GateAt: t0, At: t0.Add(time.Minute)},
			want: gateStep{kind: stepRelease, batches: []int{1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked := false
			got := decide(tt.c, tt.staged, rec(tt.policy), func() gateResult { asked = true; return tt.gate }, tt.now)
			if got.kind != tt.want.kind || got.result != tt.want.result || got.why != tt.want.why || !slices.Equal(got.batches, tt.want.batches) {
				t.Errorf("decide = %+v, want %+v", got, tt.want)
			}
			if asked && (tt.c.State != events.StateRunning || tt.want.kind == stepSend || tt.c.Batch >= 3) {
				t.Error("the gate was asked where it does not matter")
			}
		})
	}
}

// TestGateWritesYieldToTheOperator: what a gate writes is conditional on
// the control record it decided on. An operator's pause and resume landing
// between the gate's read and its write is not overwritten by a trip or a
// wait for promote, and a batch does not open on a paused rollout.
func TestGateWritesYieldToTheOperator(t *testing.T) {
	ctx := t.Context()
	rc, err := NewController(ControllerConfig{Fleet: gateFleet{}, JetStream: testenv.JetStream(t)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := Open(ctx, rc.cfg.JetStream)
	if err != nil {
		t.Fatal(err)
	}
	const id = "switch/9b0d3f0e-7a51-4c4a-8c1e-3f7f3e4c2a10"
	rec := events.Rollout{EventID: id, Batches: []int{1, 2, 2}}
	now := time.Now()
	if _, err := store.OpenBatch(ctx, id, 1, now); err != nil {
		t.Fatal(err)
	}
	seen, _, err := store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	operator := func(actions ...events.ControlAction) {
		t.Helper()
		for _, action := range actions {
			if _, _, err := store.Apply(ctx, id, action, "checking", "alice", time.Now(), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := func() events.Control {
		t.Helper()
		c, _, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	operator(events.ActionPause, events.ActionResume)
	if err := rc.trip(ctx, store, rec, seen, "failed", "2 VMs failed, the policy tolerates 1"); err != nil {
		t.Fatal(err)
	}
	if c := state(); c.State != events.StateRunning || c.By != "alice" {
		t.Errorf("after a trip decided before the operator's resume: %+v, want the resume kept", c)
	}
	if err := rc.awaitPromote(ctx, store, id, seen, "batch 2 of 3 passed its gate", now); err != nil {
		t.Fatal(err)
	}
	if c := state(); c.State != events.StateRunning || c.By != "alice" {
		t.Errorf("after a wait for promote decided before the operator's resume: %+v, want the resume kept", c)
	}

	operator(events.ActionPause)
	if opened, err := store.OpenBatch(ctx, id, 2, now); err != nil || opened {
		t.Errorf("batch 3 opened on a paused rollout (%v)", err)
	}
	if c := state(); c.State != events.StatePaused || c.Batch != 1 {
		t.Errorf("after opening a batch on a pause: %+v, want paused at batch 2", c)
	}

	// Decided on the record as it is, the gate writes.
	operator(events.ActionResume)
	current := state()
	if err := rc.trip(ctx, store, rec, current, "failed", "2 VMs failed"); err != nil {
		t.Fatal(err)
	}
	if c := state(); c.State != events.StatePaused || c.By != GatedBy {
		t.Errorf("a trip on the current record: %+v, want paused by %s", c, GatedBy)
	}
}

// TestARefusedControlRecordIsLoggedNotFlooded: the gate loop meets a
// refused control record every round; it is logged (and counted) once a
// minute per rollout, not every round.
func TestARefusedControlRecordIsLoggedNotFlooded(t *testing.T) {
	var log bytes.Buffer
	rc := &Controller{cfg: ControllerConfig{Log: slog.New(slog.NewTextHandler(&log, nil)), Clock: clock.RealClock{}}, refusedAt: map[string]time.Time{}}
	for range 3 {
		rc.refuse("E", events.Control{State: events.StateRunning, Batch: 5}, "refused: the control record names batch 6, the rollout has 3")
	}
	rc.refuse("F", events.Control{State: events.StatePaused, Batch: 7}, "refused: the control record names batch 8, the rollout has 3")
	if n := strings.Count(log.String(), "a control record kvlive did not write"); n != 2 {
		t.Errorf("logged %d times, want once per rollout:\n%s", n, log.String())
	}
}

// TestTheGateForgetsRolloutsThatNoLongerWait: what the gate loop notes of
// a rollout (when it last noted its gate, when it last logged a refusal)
// goes once the rollout has nothing staged or awaited, so a long-running
// kvlive does not keep an entry per rollout it ever gated.
func TestTheGateForgetsRolloutsThatNoLongerWait(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rc := &Controller{gateNotes: map[string]time.Time{"done": time.Now(), "staged": time.Now()},
		refusedAt: map[string]time.Time{"done": time.Now()}, hooks: newHookCalls(ctx)}
	rc.forget(func(id string) bool { return id == "staged" })
	if len(rc.gateNotes) != 1 || rc.gateNotes["staged"].IsZero() || len(rc.refusedAt) != 0 {
		t.Errorf("after forgetting: notes %v, refusals %v; want only the staged rollout's note", rc.gateNotes, rc.refusedAt)
	}
}
