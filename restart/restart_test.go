package restart_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/restart"
)

// TestPlanRestartsOnlyRunningVMsThatWaitForIt: of seven VMs of u1.medium
// (pinned to 3 vCPUs and 6Gi, their VMIs at 2 and 4Gi), the one KubeVirt
// flagged RestartRequired is restarted, naming its VMI, with what the
// restart brings; one without the condition is left (none); the opted-out,
// the Halted, the Once, the stopped and the one with a start already under
// way are skipped, each saying why.
func TestPlanRestartsOnlyRunningVMsThatWaitForIt(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.medium", 3, "6Gi")
	var objs []runtime.Object
	vm := func(name string, strategy virtv1.VirtualMachineRunStrategy, running, flagged bool) *virtv1.VirtualMachine {
		v := testenv.VM("ns", name, "u1.medium")
		v.Spec.RunStrategy = &strategy
		objs = append(objs, v, testenv.Pin(t, v, it))
		if running {
			vmi := testenv.RunningVMI("ns", name)
			vmi.UID = types.UID("vmi-" + name)
			objs = append(objs, vmi)
		}
		if flagged {
			v.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}}
		}
		return v
	}
	vm("flagged", virtv1.RunStrategyAlways, true, true)
	vm("current", virtv1.RunStrategyAlways, true, false)
	vm("opted-out", virtv1.RunStrategyAlways, true, true).Annotations = map[string]string{events.DoNotDisruptAnnotation: "true"}
	vm("halted", virtv1.RunStrategyHalted, true, true)
	vm("once", virtv1.RunStrategyOnce, true, true)
	vm("stopped", virtv1.RunStrategyManual, false, true)
	busy := vm("busy", virtv1.RunStrategyRerunOnFailure, true, true)
	busy.Status.StateChangeRequests = []virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StartRequest}}
	objs = append(objs, it)
	c, err := kube.CacheOf(objs...)
	if err != nil {
		t.Fatal(err)
	}
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}
	var vms []*virtv1.VirtualMachine
	for _, o := range objs {
		if v, ok := o.(*virtv1.VirtualMachine); ok {
			vms = append(vms, v)
		}
	}
	plans := restart.Plan(c, "restart/1", ref, vms)
	if len(plans) != 7 {
		t.Fatalf("%d plans, want 7", len(plans))
	}
	byName := map[string]events.Plan{}
	for _, p := range plans {
		byName[p.VM.Name] = p
		if err := p.Validate(); err != nil {
			t.Errorf("%s: plan does not validate: %v", p.VM, err)
		}
	}
	p := byName["flagged"]
	if p.Action != events.ResultRestart || p.Target.Move != events.MoveRestart || p.Target.VMI != "vmi-flagged" {
		t.Fatalf("flagged: %s (%s) of VMI %q, want a restart of vmi-flagged", p.Action, p.Reason, p.Target.VMI)
	}
	changes := map[string]string{}
	for _, ch := range p.Changes {
		changes[ch.Field] = ch.From + "→" + ch.To + " " + ch.Class
	}
	if changes["cpu.sockets"] != "2→3 restart" || changes["memory.guest"] != "4Gi→6Gi restart" {
		t.Errorf("flagged: changes %v, want cpu.sockets 2→3 and memory.guest 4Gi→6Gi, each restart", changes)
	}
	if p := byName["current"]; p.Action != events.ResultNone || !strings.Contains(p.Reason, "RestartRequired") {
		t.Errorf("current: %s (%s), want none: no restart pending", p.Action, p.Reason)
	}
	for name, want := range map[string]string{
		"opted-out": "opted out: annotation kvlive.io/do-not-disrupt=true",
		"halted":    "run strategy Halted",
		"once":      "run strategy Once",
		"stopped":   "not running",
		"busy":      "already under way",
	} {
		if p := byName[name]; p.Action != events.ResultSkip || !strings.Contains(p.Reason, want) {
			t.Errorf("%s: %s (%s), want skip saying %q", name, p.Action, p.Reason, want)
		}
	}
}
