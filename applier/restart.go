package applier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/restart"
	"kvlive/rollout"
)

// restartVM asks KubeVirt to restart the VM, as virt-api's restart does:
// a Stop naming the running VMI, then a Start, in status.stateChangeRequests
// (virt-controller stops that VMI and starts a new one from the VM's pins).
// The VM and its VMI are read from the API server, not the cache: an
// opt-out annotated a moment ago is honoured, and a VMI restarted a moment
// ago (by an earlier attempt, or someone else) is not restarted again. The
// patch tests the VM's resourceVersion, so a VM changed between the read
// and the write is read again and decided anew.
func (a *Applier) restartVM(ctx context.Context, plan events.Plan) (events.Outcome, error) {
	t := plan.Target
	for range maxReplans {
		vm, err := a.currentVM(ctx, plan.VM, true)
		if vm == nil || err != nil {
			return a.vmGone(plan, err)
		}
		if stopRequested(vm, t.VMI) {
			return events.Outcome{Result: plan.Action, Reason: joinReason("the restart is under way (an earlier attempt asked for it)", plan.Reason),
				Stopped: t.VMI, Changes: plan.Changes, VerdictDeadline: shutdownGrace(vm, a.cfg.Fleet.VMI(vm.Namespace, vm.Name))}, nil
		}
		vmi, err := a.cfg.Clients.Virt.KubevirtV1().VirtualMachineInstances(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			vmi = nil
		case err != nil:
			return events.Outcome{}, fmt.Errorf("%w: get VMI %s: %w", errTransient, plan.VM, err)
		}
		if vmi != nil && string(vmi.UID) != t.VMI {
			return events.Outcome{Result: plan.Action, Stopped: t.VMI, Changes: plan.Changes,
				Reason: "the VM runs a new VMI already: restarted since it was planned (by an earlier attempt, or by someone else)"}, nil
		}
		if why := restart.Refused(vm, vmi); why != "" {
			return events.Outcome{Result: events.ResultSkip, Reason: joinReason("not restarted", why)}, nil
		}
		if _, flagged := instancetype.RestartRequired(vm); !flagged {
			return events.Outcome{Result: events.ResultNone, Reason: "no restart pending any more: RestartRequired is gone"}, nil
		}
		// The window is the last thing checked before the write: a turn
		// waited for under --rate may end after the window closed.
		if err := a.takeTurn(ctx, &plan, nil); err != nil {
			return events.Outcome{}, err
		}
		if err := a.withinWindow(ctx, plan); err != nil {
			return events.Outcome{}, err
		}
		_, err = a.cfg.Clients.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.JSONPatchType,
			RestartPatch(vm, vmi.UID), metav1.PatchOptions{}, "status")
		if err == nil {
			trace.SpanFromContext(ctx).AddEvent("restart requested", trace.WithAttributes(attribute.String("kvlive.vmi.uid", t.VMI)))
			return events.Outcome{Result: plan.Action, Reason: plan.Reason, Wrote: true, Stopped: t.VMI, Changes: plan.Changes,
				VerdictDeadline: shutdownGrace(vm, vmi)}, nil
		}
		out, changed, err := a.patchFailed(ctx, plan, err, func(fresh *virtv1.VirtualMachine) bool {
			return fresh.ResourceVersion != vm.ResourceVersion
		})
		if !changed {
			return out, err
		}
	}
	return events.Outcome{}, fmt.Errorf("%w: VM %s kept changing while being restarted", errTransient, plan.VM)
}

// shutdownGrace is how long KubeVirt gives the VM's running VMI (or, when
// it is not at hand, the VMI its template makes) to shut down once asked
// to stop: its terminationGracePeriodSeconds, or KubeVirt's default. A
// restart's verdict waits for it on top of the verdict deadline, so a
// guest that takes its grace period to stop is not judged pending.
func shutdownGrace(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) time.Duration {
	seconds := virtv1.DefaultGracePeriodSeconds
	switch {
	case vmi != nil && vmi.Spec.TerminationGracePeriodSeconds != nil:
		seconds = *vmi.Spec.TerminationGracePeriodSeconds
	case vm.Spec.Template != nil && vm.Spec.Template.Spec.TerminationGracePeriodSeconds != nil:
		seconds = *vm.Spec.Template.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(seconds) * time.Second
}

// errOutsideWindow stops a restart due outside its rollout's restart
// window: the rollout is paused until the window opens and the plan held.
var errOutsideWindow = errors.New("outside the restart window")

// withinWindow makes sure a restart (or a move KubeVirt answers with an
// eviction) goes inside its rollout's restart window: outside it, the
// rollout is paused until the window opens (a window that closed while
// the batch went), and errOutsideWindow says to hold the plan.
func (a *Applier) withinWindow(ctx context.Context, plan events.Plan) error {
	r, err := a.knownRollout(ctx, plan.EventID)
	if err != nil {
		return fmt.Errorf("%w: %w", errTransient, err)
	}
	now := a.cfg.Clock.Now()
	open, opens := r.window.At(now)
	if open {
		return nil
	}
	if a.control != nil {
		paused, err := a.control.PauseUntil(ctx, plan.EventID, rollout.WindowPause(r.window, opens), now, opens)
		if err != nil {
			return fmt.Errorf("%w: %w", errTransient, err)
		}
		if paused {
			a.cfg.Metrics.Gate("window", "paused")
			a.cfg.Log.Info("rollout paused until its restart window opens: a restart or eviction came due outside it", "event", plan.EventID, "vm", plan.VM.String(), "opens", opens)
		}
	}
	return errOutsideWindow
}

// stopRequested reports whether vm's status holds a Stop of the VMI with
// uid: a restart asked for and not yet carried out.
func stopRequested(vm *virtv1.VirtualMachine, uid string) bool {
	for _, r := range vm.Status.StateChangeRequests {
		if r.Action == virtv1.StopRequest && r.UID != nil && string(*r.UID) == uid {
			return true
		}
	}
	return false
}

// RestartPatch is the status patch of a restart of vm's running VMI (uid):
// what virt-api's restart writes (getChangeRequestJson in
// pkg/virt-api/rest/lifecycle.go), a Stop naming the VMI and a Start, with
// a test of the VM's resourceVersion, so the write fails on a VM changed
// since it was read (another start or stop, an opt-out annotated).
func RestartPatch(vm *virtv1.VirtualMachine, uid types.UID) []byte {
	requests := []virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StopRequest, UID: &uid}, {Action: virtv1.StartRequest}}
	ops := []op{{Op: "test", Path: "/metadata/resourceVersion", Value: vm.ResourceVersion}}
	if equality.Semantic.DeepEqual(vm.Status, virtv1.VirtualMachineStatus{}) {
		ops = append(ops, op{Op: "add", Path: "/status", Value: virtv1.VirtualMachineStatus{StateChangeRequests: requests}})
	} else {
		ops = append(ops, op{Op: "add", Path: "/status/stateChangeRequests", Value: requests})
	}
	if vm.Status.StartFailure != nil {
		ops = append(ops, op{Op: "remove", Path: "/status/startFailure"})
	}
	patch, _ := json.Marshal(ops)
	return patch
}
