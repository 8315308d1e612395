//go:build integration

package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/rollout"
)

// clusterView is one listing of the cluster's VMs, VMIs and instancetype
// ControllerRevisions, each keyed by namespace/name.
type clusterView struct {
	vms  map[string]*virtv1.VirtualMachine
	vmis map[string]*virtv1.VirtualMachineInstance
	revs map[string]*appsv1.ControllerRevision
}

// view lists the cluster.
func (e *env) view() clusterView {
	e.t.Helper()
	v := e.fleetView()
	revs, err := e.clients.Kube.AppsV1().ControllerRevisions("").List(e.ctx, metav1.ListOptions{LabelSelector: instancetypeapi.ControllerRevisionObjectKindLabel})
	if err != nil {
		e.t.Fatalf("list ControllerRevisions: %v", err)
	}
	for i := range revs.Items {
		v.revs[revs.Items[i].Namespace+"/"+revs.Items[i].Name] = &revs.Items[i]
	}
	return v
}

// fleetView lists the cluster's VMs and VMIs only: what waits poll for,
// which a listing of every revision (several a VM, snapshots included)
// would slow, and the API server with them.
func (e *env) fleetView() clusterView {
	e.t.Helper()
	v := clusterView{vms: map[string]*virtv1.VirtualMachine{}, vmis: map[string]*virtv1.VirtualMachineInstance{}, revs: map[string]*appsv1.ControllerRevision{}}
	vms, err := e.clients.Virt.KubevirtV1().VirtualMachines("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("list VMs: %v", err)
	}
	for i := range vms.Items {
		v.vms[vms.Items[i].Namespace+"/"+vms.Items[i].Name] = &vms.Items[i]
	}
	vmis, err := e.clients.Virt.KubevirtV1().VirtualMachineInstances("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("list VMIs: %v", err)
	}
	for i := range vmis.Items {
		v.vmis[vmis.Items[i].Namespace+"/"+vmis.Items[i].Name] = &vmis.Items[i]
	}
	return v
}

// pinProblem says why a VM is not referencing it and pinned to its current
// generation the way KubeVirt pins (KubeVirt's revision name, a revision
// with KubeVirt's labels, owned by the VM), or "" when it is.
func pinProblem(v clusterView, s vmShape, it metav1.Object) string {
	vm := v.vms[s.key()]
	if vm == nil {
		return "VM is gone"
	}
	if vm.Spec.Instancetype == nil {
		return "references no instance type"
	}
	if vm.Spec.Instancetype.Name != it.GetName() {
		return fmt.Sprintf("references %s, want %s", vm.Spec.Instancetype.Name, it.GetName())
	}
	want := kubevirtRevisionName(vm.Name, it)
	ref := vm.Status.InstancetypeRef
	if ref == nil || ref.ControllerRevisionRef == nil {
		return "no status pin"
	}
	if ref.Name != it.GetName() || ref.ControllerRevisionRef.Name != want {
		return fmt.Sprintf("status pin %s (%s), want %s", ref.ControllerRevisionRef.Name, ref.Name, want)
	}
	cr := v.revs[s.namespace+"/"+want]
	if cr == nil {
		return "pinned revision " + want + " does not exist"
	}
	labels := map[string]string{
		instancetypeapi.ControllerRevisionObjectUIDLabel:        string(it.GetUID()),
		instancetypeapi.ControllerRevisionObjectGenerationLabel: strconv.FormatInt(it.GetGeneration(), 10),
		instancetypeapi.ControllerRevisionObjectNameLabel:       it.GetName(),
		instancetypeapi.ControllerRevisionObjectKindLabel:       events.KindClusterInstancetype,
		instancetypeapi.ControllerRevisionObjectVersionLabel:    v1beta1.SchemeGroupVersion.Version,
	}
	for k, want := range labels {
		if cr.Labels[k] != want {
			return fmt.Sprintf("revision %s: label %s=%q, want %q", cr.Name, k, cr.Labels[k], want)
		}
	}
	if owner := metav1.GetControllerOf(cr); owner == nil || owner.UID != vm.UID {
		return fmt.Sprintf("revision %s: controller %+v, want the VM", cr.Name, owner)
	}
	return ""
}

// standinProblem says where the stand-in's independent view of a VM
// disagrees with its outcome's result, or "" when it agrees: live, the VMI
// runs the target's sockets and memory; restart, the VM has RestartRequired;
// next-boot, there is no VMI to change and no RestartRequired.
func standinProblem(v clusterView, s vmShape, result events.Result, target v1beta1.VirtualMachineInstancetypeSpec) string {
	vm, vmi := v.vms[s.key()], v.vmis[s.key()]
	if vm == nil {
		return "VM is gone"
	}
	switch result {
	case events.ResultLive:
		switch {
		case vmi == nil:
			return "live, but no VMI"
		case restartRequired(vm):
			return "live, but RestartRequired is set"
		case vmi.Spec.Domain.CPU.Sockets != target.CPU.Guest || !vmi.Spec.Domain.Memory.Guest.Equal(target.Memory.Guest):
			return fmt.Sprintf("live, but the VMI runs %d sockets and %s; want %d and %s",
				vmi.Spec.Domain.CPU.Sockets, vmi.Spec.Domain.Memory.Guest, target.CPU.Guest, &target.Memory.Guest)
		}
	case events.ResultRestart:
		if !restartRequired(vm) {
			return "restart, but no RestartRequired condition"
		}
	case events.ResultNextBoot:
		if vmi != nil || restartRequired(vm) {
			return fmt.Sprintf("next-boot, but a VMI exists (%v) or RestartRequired is set (%v)", vmi != nil, restartRequired(vm))
		}
	default:
		return fmt.Sprintf("result %s", result)
	}
	return ""
}

func restartRequired(vm *virtv1.VirtualMachine) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == virtv1.VirtualMachineRestartRequired && c.Status == k8scorev1.ConditionTrue {
			return true
		}
	}
	return false
}

// waitSettled waits until problem reports nothing for every VM in shapes:
// the stand-in acts on kvlive's writes asynchronously.
func (e *env) waitSettled(what string, shapes []vmShape, problem func(clusterView, vmShape) string) {
	e.t.Helper()
	timeout := settleTimeout
	if e.t.Failed() {
		timeout = 30 * time.Second // the rollout is already wrong: report soon
	}
	e.waitFor(what, timeout, func() (bool, string) {
		v := e.view()
		var problems []string
		for _, s := range shapes {
			if p := problem(v, s); p != "" {
				problems = append(problems, s.key()+": "+p)
			}
		}
		if len(problems) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d VMs, first: %v", len(problems), problems[:min(len(problems), 5)])
	})
}

// rolloutWant is what a finished rollout must look like.
type rolloutWant struct {
	eventID string
	// shapes are the VMs the event reaches; no other VM may have a plan.
	shapes []vmShape
	// action is each VM's planned action.
	action func(vmShape) events.Result
	// outcome, when set, is the result each VM's outcomes must have and a
	// phrase their reason must hold; by default, the plan's action.
	outcome func(vmShape) (events.Result, string)
	// revision, when set, is the revision the outcome of each moved VM names.
	revision func(vmShape) string
	// clean means nothing was interrupted: each VM has exactly one outcome,
	// which wrote if it moved the VM. Otherwise a VM may have several, which
	// must agree.
	clean bool
}

// checkRollout asserts the rollout reached exactly the wanted VMs, each
// with its plan, and that every outcome is what the VM's plan (read back
// from KVLIVE_PLANS and matched by event id and VM UID) makes it.
func (e *env) checkRollout(p rollout.Progress, w rolloutWant) {
	e.t.Helper()
	if p.Planned != len(w.shapes) || len(p.Outcomes) != len(w.shapes) {
		e.t.Errorf("%s: %d planned, %d VMs with an outcome; want %d", w.eventID, p.Planned, len(p.Outcomes), len(w.shapes))
	}
	plans, outs := e.plans(w.eventID), e.outcomes(w.eventID)
	if e.plansTap.gapped.Load() && len(plans) < len(w.shapes) {
		// The tap was down with NATS while kvlive, back first, planned:
		// the plans it missed are checked as the rollout wants them.
		e.t.Logf("%s: the test's tap saw %d of %d plans (its connection was down with NATS); the rest are checked against the wanted actions",
			w.eventID, len(plans), len(w.shapes))
		for _, s := range w.shapes {
			if uid := e.uids[s.key()]; plans[uid].EventID == "" {
				plans[uid] = events.Plan{EventID: w.eventID, Action: w.action(s)}
			}
		}
	}
	if len(plans) != len(w.shapes) || len(outs) != len(w.shapes) {
		e.t.Errorf("%s: plans for %d VMs, outcomes for %d; want %d", w.eventID, len(plans), len(outs), len(w.shapes))
	}
	var problems []string
	for _, s := range w.shapes {
		if p := outcomeProblem(s, plans[e.uids[s.key()]], outs[e.uids[s.key()]], w); p != "" {
			problems = append(problems, s.key()+": "+p)
		}
	}
	report(e.t, w.eventID+" outcomes", problems)
}

// outcomeProblem checks one VM's plan and outcomes.
func outcomeProblem(s vmShape, plan events.Plan, outs []events.Outcome, w rolloutWant) string {
	want, phrase := plan.Action, ""
	if w.outcome != nil {
		want, phrase = w.outcome(s)
	}
	switch {
	case plan.EventID == "":
		return "no plan"
	case plan.Action != w.action(s):
		return fmt.Sprintf("planned %s (%s), want %s", plan.Action, plan.Reason, w.action(s))
	case len(outs) == 0:
		return "no outcome"
	case w.clean && len(outs) != 1:
		return fmt.Sprintf("%d outcomes, want one", len(outs))
	case w.clean && outs[0].Wrote != want.Moves():
		return fmt.Sprintf("outcome wrote: %v, want %v: %+v", outs[0].Wrote, want.Moves(), outs[0])
	}
	for _, o := range outs {
		switch {
		case o.Result != want:
			return fmt.Sprintf("outcome (attempt %d) %s (%s%s), want %s (plan: %s)", o.Attempt, o.Result, o.Reason, o.Error, want, plan.Action)
		case !strings.Contains(o.Reason, phrase):
			return fmt.Sprintf("outcome reason %q does not say %q", o.Reason, phrase)
		case w.revision != nil && want.Moves() && o.Revision != w.revision(s):
			return fmt.Sprintf("outcome names revision %q, want %q", o.Revision, w.revision(s))
		}
	}
	return ""
}

// report fails the test with the number of problems and the first few.
func report(t *testing.T, what string, problems []string) {
	t.Helper()
	if len(problems) == 0 {
		return
	}
	t.Errorf("%s: %d problems, first %d:", what, len(problems), min(len(problems), 10))
	for _, p := range problems[:min(len(problems), 10)] {
		t.Errorf("  %s", p)
	}
}

// revisionOf names the revision KubeVirt pins a VM to for it's current generation.
func revisionOf(it metav1.Object) func(vmShape) string {
	return func(s vmShape) string { return kubevirtRevisionName(s.name, it) }
}

// kubevirtRevisionName is the name KubeVirt gives a VM's snapshot of an
// instance type generation, <vm>-<object>-<version>-<object uid>-<generation>
// (pkg/instancetype/revision/store.go), spelled out here rather than taken
// from internal/fleet so that the tests check kvlive's naming, not use it.
func kubevirtRevisionName(vm string, it metav1.Object) string {
	return fmt.Sprintf("%s-%s-%s-%s-%d", vm, it.GetName(), v1beta1.SchemeGroupVersion.Version, it.GetUID(), it.GetGeneration())
}
