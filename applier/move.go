package applier

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
	"kvlive/instancetype"
)

// maxReplans bounds how often one plan is re-planned because the VM kept
// changing under it; past that the plan is retried later.
const maxReplans = 3

// errTransient marks a failure worth another delivery.
var errTransient = errors.New("transient")

// apply carries one plan out. It returns an error only for a transient
// failure; everything else, permanent failures included, is an outcome.
func (a *Applier) apply(ctx context.Context, plan events.Plan) (events.Outcome, error) {
	var vm *virtv1.VirtualMachine
	var err error
	if plan.Recheck {
		if plan, vm, err = a.recheck(ctx, plan); vm == nil || err != nil {
			return a.vmGone(plan, err)
		}
	}
	if !plan.Action.Moves() {
		return events.Outcome{Result: plan.Action, Reason: plan.Reason, Changes: plan.Changes}, nil
	}
	if plan.Target.Move == events.MoveRestart {
		return a.restartVM(ctx, plan)
	}
	if vm == nil {
		if vm, err = a.currentVM(ctx, plan.VM, false); vm == nil || err != nil {
			return a.vmGone(plan, err)
		}
	}
	out, moved, err := a.move(ctx, plan, vm)
	if err != nil || !moved {
		return out, err
	}
	// The VM no longer matches the plan. The cache may just be behind:
	// look at the VM as the server has it before deciding anew.
	for range maxReplans {
		trace.SpanFromContext(ctx).AddEvent("pin moved", trace.WithAttributes(attribute.String("kvlive.pin.planned", plan.Target.FromRevision)))
		if vm, err = a.currentVM(ctx, plan.VM, true); vm == nil || err != nil {
			return a.vmGone(plan, err)
		}
		if out, moved, err = a.move(ctx, plan, vm); err != nil || !moved {
			return out, err
		}
		if plan, err = a.replan(plan, vm); err != nil {
			return events.Outcome{}, err
		}
		if plan.Recheck {
			// Decided on a cache that may be behind the VM just read:
			// retried, as the first delivery's recheck is, when it is.
			if err := a.revisionBehind(ctx, vm, plan.Target.Object.IsPreference()); err != nil {
				return events.Outcome{}, err
			}
		}
		const note = "re-planned: the VM changed after it was planned"
		if !plan.Action.Moves() {
			return events.Outcome{Result: plan.Action, Reason: joinReason(note, plan.Reason), Changes: plan.Changes}, nil
		}
		if out, moved, err = a.move(ctx, plan, vm); err != nil || !moved {
			out.Reason = joinReason(note, out.Reason)
			return out, err
		}
	}
	return events.Outcome{}, fmt.Errorf("%w: VM %s kept changing while being moved", errTransient, plan.VM)
}

// atTarget returns the outcome of a plan the VM already carries out
// (pinned to the target's snapshot, or switched to the target), nil when it
// does not, or the VM is gone. It reads the informer cache (the API server
// only for a VM the cache lacks): an earlier delivery that moved the VM did
// so at least an AckWait before this redelivery, or before a restart whose
// cache listed the VMs afresh, so the cache holds the move.
func (a *Applier) atTarget(ctx context.Context, plan events.Plan) (*events.Outcome, error) {
	if !plan.Action.Moves() && !plan.Recheck {
		return nil, nil
	}
	vm, err := a.currentVM(ctx, plan.VM, false)
	if vm == nil || err != nil {
		return nil, err
	}
	t := plan.Target
	preference := t.Object.IsPreference()
	const note = "the VM moved before the rollout was aborted (an earlier attempt)"
	if t.Move == events.MoveRestart {
		if stopRequested(vm, t.VMI) {
			return &events.Outcome{Result: plan.Action, Reason: joinReason("the restart was asked for before the rollout was aborted (an earlier attempt)", plan.Reason),
				Stopped: t.VMI, Changes: plan.Changes, VerdictDeadline: shutdownGrace(vm, a.cfg.Fleet.VMI(vm.Namespace, vm.Name))}, nil
		}
		if vmi := a.cfg.Fleet.VMI(vm.Namespace, vm.Name); vmi != nil && string(vmi.UID) != t.VMI {
			return &events.Outcome{Result: plan.Action, Stopped: t.VMI, Changes: plan.Changes,
				Reason: "the VM ran a new VMI before the rollout was aborted (restarted by an earlier attempt, or by someone else)"}, nil
		}
		return nil, nil
	}
	if t.Move == events.MoveSwitch {
		if ref, ok := instancetype.RefOf(vm, preference); ok && ref == t.Object {
			return &events.Outcome{Result: plan.Action, Reason: joinReason(note, plan.Reason), SwitchedTo: &t.Object, Changes: plan.Changes}, nil
		}
		return nil, nil
	}
	if t.Move == events.MoveRevert {
		if pin, err := instancetype.PinOf(vm, preference); err == nil && pin.Revision == t.Revision {
			return &events.Outcome{Result: plan.Action, Reason: joinReason(note, plan.Reason), Revision: t.Revision, From: t.FromRevision, Changes: plan.Changes}, nil
		}
		return nil, nil
	}
	// By the revision's name, not the live object: one superseded since
	// (a newer generation) is no longer there to snapshot, and the move
	// was made all the same.
	want := targetRevision(vm, t)
	if pin, err := instancetype.PinOf(vm, preference); err == nil && pin.Revision == want {
		return &events.Outcome{Result: plan.Action, Reason: joinReason(note, plan.Reason), Revision: want, From: a.movedFrom(ctx, vm.Namespace, want, t.FromRevision), Changes: plan.Changes}, nil
	}
	return nil, nil
}

// recheck decides a plan again on the VM as the API server has it, for a
// skip the planner based on cached state that may have been behind: KubeVirt
// pins a VM (and snapshots its revision) moments after it is created, and an
// event arriving in between must not leave the VM on the old generation. It
// returns the VM it read, nil when the VM is gone.
func (a *Applier) recheck(ctx context.Context, plan events.Plan) (events.Plan, *virtv1.VirtualMachine, error) {
	vm, err := a.currentVM(ctx, plan.VM, true)
	if vm == nil || err != nil {
		return plan, nil, err
	}
	fresh, err := a.replan(plan, vm)
	if err != nil {
		return plan, nil, err
	}
	if fresh.Recheck {
		// Still skipped: fine when the server agrees, a retry when only the
		// revision cache is behind.
		if err := a.revisionBehind(ctx, vm, plan.Target.Object.IsPreference()); err != nil {
			return plan, nil, err
		}
		return fresh, vm, nil
	}
	trace.SpanFromContext(ctx).AddEvent("re-planned on a fresh read", trace.WithAttributes(attribute.String("kvlive.plan.action", string(fresh.Action))))
	fresh.Reason = joinReason("re-planned: the planner's cache was behind the VM", fresh.Reason)
	return fresh, vm, nil
}

// revisionBehind reports, as a transient error, a pinned ControllerRevision
// that the server has but the cache has not seen yet.
func (a *Applier) revisionBehind(ctx context.Context, vm *virtv1.VirtualMachine, preference bool) error {
	pin, err := instancetype.PinOf(vm, preference)
	if err != nil {
		return nil
	}
	cr, err := a.cfg.Clients.Kube.AppsV1().ControllerRevisions(vm.Namespace).Get(ctx, pin.Revision, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("%w: get ControllerRevision %s/%s: %w", errTransient, vm.Namespace, pin.Revision, err)
	case !instancetype.IsSnapshot(cr):
		return nil // not an instancetype snapshot: the cache never holds it, the skip stands
	}
	return fmt.Errorf("%w: ControllerRevision %s/%s is not in the cache yet", errTransient, vm.Namespace, pin.Revision)
}

// move performs one attempt. moved reports that the VM no longer matches
// what the plan tested against, so the caller re-plans.
func (a *Applier) move(ctx context.Context, plan events.Plan, vm *virtv1.VirtualMachine) (events.Outcome, bool, error) {
	switch plan.Target.Move {
	case events.MoveSwitch:
		return a.switchVM(ctx, plan, vm)
	case events.MoveRevert:
		out, err := a.revert(ctx, plan, vm, false)
		return out, false, err
	}
	return a.repin(ctx, plan, vm)
}

func (a *Applier) repin(ctx context.Context, plan events.Plan, vm *virtv1.VirtualMachine) (events.Outcome, bool, error) {
	t := plan.Target
	preference := t.Object.IsPreference()
	// An earlier attempt's move is told before anything else: the object
	// may have moved on since (superseded), which says nothing of it.
	if pin, err := instancetype.PinOf(vm, preference); err == nil && pin.Revision == targetRevision(vm, t) {
		return events.Outcome{Result: plan.Action, Reason: joinReason("already pinned to the target (an earlier attempt moved it)", plan.Reason),
			Revision: pin.Revision, From: a.movedFrom(ctx, vm.Namespace, pin.Revision, t.FromRevision), Changes: plan.Changes}, false, nil
	}
	obj, skip, err := a.targetObject(t)
	if obj == nil {
		return events.Outcome{Result: events.ResultSkip, Reason: skip}, false, err
	}
	want, err := instancetype.NewRevision(vm, obj)
	if err != nil {
		return failed(err), false, nil
	}
	pin, err := instancetype.PinOf(vm, preference)
	if err != nil {
		return events.Outcome{}, true, nil
	}
	if pin.Revision != t.FromRevision || pin.Field != t.Pin || !references(vm, t.Object) {
		return events.Outcome{}, true, nil
	}
	if skip := ownedElsewhere(vm, t, pin.Field); skip != nil {
		return *skip, false, nil
	}
	if err := a.takeTurn(ctx, &plan, vm); err != nil {
		if errors.Is(err, errStale) {
			return events.Outcome{}, true, nil
		}
		return events.Outcome{}, false, err
	}
	if err := a.ensureRevision(ctx, want, pin.Revision); err != nil {
		return classify(err)
	}
	patch, sub := RepinPatch(vm, pin.Field, preference, pin.Revision, want.Name)
	if plan.Action == events.ResultNextBoot {
		patch = AsRead(vm, patch)
	}
	written, err := a.cfg.Clients.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, sub...)
	if err != nil {
		return a.patchFailed(ctx, plan, err, func(fresh *virtv1.VirtualMachine) bool {
			p, perr := instancetype.PinOf(fresh, preference)
			return perr != nil || p.Revision != pin.Revision || p.Field != pin.Field || !references(fresh, t.Object) ||
				(plan.Action == events.ResultNextBoot && fresh.ResourceVersion != vm.ResourceVersion)
		})
	}
	trace.SpanFromContext(ctx).AddEvent("pin moved", trace.WithAttributes(attribute.String("kvlive.revision", want.Name)))
	return events.Outcome{Result: plan.Action, Reason: plan.Reason, Revision: want.Name, From: pin.Revision, Wrote: true, Changes: plan.Changes,
		AtMove: a.atMove(written, pin.Field == events.PinSpecRevisionName)}, false, nil
}

// revert moves an undo's VM back to the revision it was pinned to before
// the rollout undone, re-creating the revision from the plan's snapshot if
// it is gone. A VM someone changed since (another pin or object), as the
// API server has it (fresh), is not moved: its outcome is a skip that says
// what it is on now.
func (a *Applier) revert(ctx context.Context, plan events.Plan, vm *virtv1.VirtualMachine, fresh bool) (events.Outcome, error) {
	t := plan.Target
	preference := t.Object.IsPreference()
	pin, err := instancetype.PinOf(vm, preference)
	if err == nil && pin.Revision == t.Revision {
		return events.Outcome{Result: plan.Action, Reason: joinReason("already back on the revision (an earlier attempt moved it)", plan.Reason),
			Revision: t.Revision, From: t.FromRevision, Changes: plan.Changes}, nil
	}
	if changed := changedSince(vm, t, pin, err); changed != "" {
		if !fresh {
			return a.revertFresh(ctx, plan)
		}
		return events.Outcome{Result: events.ResultSkip, Reason: "changed since the rollout moved it: " + changed}, nil
	}
	if skip := ownedElsewhere(vm, t, pin.Field); skip != nil {
		return *skip, nil
	}
	if err := a.takeTurn(ctx, &plan, vm); err != nil {
		return events.Outcome{}, err
	}
	if skip, err := a.ensureReverted(ctx, vm, t); skip != "" || err != nil {
		out, _, err := classify(err)
		if skip != "" {
			out = events.Outcome{Result: events.ResultSkip, Reason: skip}
		}
		return out, err
	}
	patch, sub := RepinPatch(vm, pin.Field, preference, pin.Revision, t.Revision)
	if plan.Action == events.ResultNextBoot {
		patch = AsRead(vm, patch)
	}
	written, err := a.cfg.Clients.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, sub...)
	if err != nil {
		out, moved, err := a.patchFailed(ctx, plan, err, func(fresh *virtv1.VirtualMachine) bool {
			p, perr := instancetype.PinOf(fresh, preference)
			return perr != nil || p.Revision != pin.Revision || p.Field != pin.Field || !references(fresh, t.Object) ||
				(plan.Action == events.ResultNextBoot && fresh.ResourceVersion != vm.ResourceVersion)
		})
		if moved && !fresh {
			return a.revertFresh(ctx, plan)
		}
		if moved {
			return events.Outcome{}, fmt.Errorf("%w: VM %s kept changing while being moved back", errTransient, plan.VM)
		}
		return out, err
	}
	trace.SpanFromContext(ctx).AddEvent("pin moved back", trace.WithAttributes(attribute.String("kvlive.revision", t.Revision)))
	return events.Outcome{Result: plan.Action, Reason: plan.Reason, Revision: t.Revision, From: pin.Revision, Wrote: true, Changes: plan.Changes,
		AtMove: a.atMove(written, pin.Field == events.PinSpecRevisionName)}, nil
}

// revertFresh reverts the VM as the API server has it.
func (a *Applier) revertFresh(ctx context.Context, plan events.Plan) (events.Outcome, error) {
	vm, err := a.currentVM(ctx, plan.VM, true)
	if vm == nil || err != nil {
		return a.vmGone(plan, err)
	}
	return a.revert(ctx, plan, vm, true)
}

// changedSince says how vm left where the rollout undone put it, "" when
// it did not: another object, another pin.
func changedSince(vm *virtv1.VirtualMachine, t events.Target, pin instancetype.Pin, pinErr error) string {
	if !references(vm, t.Object) {
		ref, ok := instancetype.RefOf(vm, t.Object.IsPreference())
		if !ok {
			return "it references no " + t.Object.Kind
		}
		return "it references " + ref.String()
	}
	switch {
	case pinErr != nil:
		return pinErr.Error()
	case pin.Revision != t.FromRevision || pin.Field != t.Pin:
		return "it is pinned to " + pin.Revision + ", not " + t.FromRevision
	}
	return ""
}

// ensureReverted makes sure the revision a revert pins exists: the cache
// or the API server has it, or it is re-created from the plan's snapshot.
// Without either, skip says why the VM stays.
func (a *Applier) ensureReverted(ctx context.Context, vm *virtv1.VirtualMachine, t events.Target) (skip string, _ error) {
	if _, ok := a.cfg.Fleet.Revision(vm.Namespace, t.Revision); ok {
		return "", nil
	}
	if len(t.Snapshot) > 0 {
		want, err := instancetype.RevisionFromSnapshot(vm, t.Snapshot)
		if err != nil {
			return fmt.Sprintf("revision %s is gone and its snapshot does not decode: %v", t.Revision, err), nil
		}
		if want.Name != t.Revision {
			return fmt.Sprintf("revision %s is gone and the snapshot kept is of %s", t.Revision, want.Name), nil
		}
		return "", a.ensureRevision(ctx, want, "")
	}
	_, err := a.cfg.Clients.Kube.AppsV1().ControllerRevisions(vm.Namespace).Get(ctx, t.Revision, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("revision %s is gone and the rollout's record holds no snapshot of it", t.Revision), nil
	}
	return "", err
}

func (a *Applier) switchVM(ctx context.Context, plan events.Plan, vm *virtv1.VirtualMachine) (events.Outcome, bool, error) {
	t := plan.Target
	preference := t.Object.IsPreference()
	current, ok := MatcherOf(vm, preference)
	if !ok {
		return events.Outcome{}, true, nil
	}
	currentRef, _ := instancetype.InstancetypeRef(vm)
	if preference {
		currentRef, _ = instancetype.PreferenceRef(vm)
	}
	if currentRef == t.Object {
		return events.Outcome{Result: plan.Action, Reason: joinReason("already switched (an earlier attempt moved it)", plan.Reason), SwitchedTo: &t.Object, Changes: plan.Changes}, false, nil
	}
	if t.From == nil || currentRef != *t.From {
		return events.Outcome{}, true, nil
	}
	if a.cfg.Fleet.Object(t.Object) == nil {
		return events.Outcome{Result: events.ResultSkip, Reason: fmt.Sprintf("%s was deleted before the VM moved", t.Object)}, false, nil
	}
	if skip := ownedElsewhere(vm, t, ""); skip != nil {
		return *skip, false, nil
	}
	if err := a.takeTurn(ctx, &plan, vm); err != nil {
		if errors.Is(err, errStale) {
			return events.Outcome{}, true, nil
		}
		return events.Outcome{}, false, err
	}
	// A server-side apply as kvlive, forced past the writers by update
	// (the VM's creator, an edit) that hold no declared ownership, with
	// the VM's resourceVersion: anything that changed it since it was read
	// (a GitOps tool applying, a user switching it) fails the write, and
	// the VM is read and decided again. A legacy revisionName must go in
	// the same write (KubeVirt's webhook rejects a new name with the old
	// revision), which only a JSON patch can do.
	patch, patchType, opts := SwitchApply(vm, preference, t.Object), types.ApplyPatchType, metav1.PatchOptions{FieldManager: instancetype.FieldManager, Force: ptr.To(true)}
	if current.RevisionName != "" {
		patch, patchType, opts = SwitchPatch(current, preference, t.Object), types.JSONPatchType, metav1.PatchOptions{FieldManager: instancetype.FieldManager}
	}
	written, err := a.cfg.Clients.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, patchType, patch, opts)
	if err != nil {
		return a.patchFailed(ctx, plan, err, func(fresh *virtv1.VirtualMachine) bool {
			m, ok := MatcherOf(fresh, preference)
			return !ok || m != current || fresh.ResourceVersion != vm.ResourceVersion
		})
	}
	trace.SpanFromContext(ctx).AddEvent("reference switched", trace.WithAttributes(attribute.String("kvlive.target", t.Object.String())))
	return events.Outcome{Result: plan.Action, Reason: plan.Reason, Wrote: true, SwitchedTo: &t.Object, Changes: plan.Changes, AtMove: a.atMove(written, true)}, false, nil
}

// atMove records the VM as the move's write left it (written, the API
// server's answer) and the migration its cached VMI showed, for the
// verdict to tell KubeVirt's answer to the move from what stood before.
func (a *Applier) atMove(written *virtv1.VirtualMachine, specWrite bool) *events.AtMove {
	var vmi *virtv1.VirtualMachineInstance
	if a.cfg.Migrations != nil && written != nil {
		vmi = a.cfg.Migrations.VMI(written.Namespace, written.Name)
	}
	return instancetype.AtMove(written, vmi, specWrite)
}

// ownedElsewhere is the skip of a VM whose fields the move writes (pin:
// the pin's field, for a re-pin or revert) another manager owns by
// server-side apply, unless the plan forces conflicts; nil otherwise.
func ownedElsewhere(vm *virtv1.VirtualMachine, t events.Target, pin events.PinField) *events.Outcome {
	if t.Force {
		return nil
	}
	written := instancetype.WrittenPaths(t, pin)
	if owners := instancetype.FieldOwners(vm, written...); len(owners) > 0 {
		return &events.Outcome{Result: events.ResultSkip, Reason: instancetype.ManagedBy(owners, written, t.Move)}
	}
	return nil
}

// references reports whether vm references obj, in its spec and, once
// KubeVirt has recorded it, in its status: a VM switched elsewhere by a
// user is not re-pinned, whatever its pin still says.
func references(vm *virtv1.VirtualMachine, obj events.Ref) bool {
	preference := obj.IsPreference()
	if ref, ok := instancetype.RefOf(vm, preference); !ok || ref != obj {
		return false
	}
	status := vm.Status.InstancetypeRef
	if preference {
		status = vm.Status.PreferenceRef
	}
	return status == nil || status.Name == "" || status.Name == obj.Name
}

// patchFailed tells a lost race (the test op failed because the VM changed,
// which changed() sees on a fresh read) from a real failure.
func (a *Applier) patchFailed(ctx context.Context, plan events.Plan, err error, changed func(*virtv1.VirtualMachine) bool) (events.Outcome, bool, error) {
	if apierrors.IsNotFound(err) {
		return events.Outcome{Result: events.ResultSkip, Reason: "VM was deleted before it could be moved"}, false, nil
	}
	fresh, getErr := a.currentVM(ctx, plan.VM, true)
	if getErr == nil && fresh != nil && changed(fresh) {
		return events.Outcome{}, true, nil
	}
	return classify(fmt.Errorf("patch VM %s: %w", plan.VM, err))
}

// movedFrom is the pin an earlier attempt moved a VM from to revision,
// which this attempt did not see: the revision kvlive created for that move
// names it (instancetype.SupersedesAnnotation), and it differs from the
// plan's own when that attempt found the VM moved and planned again.
// planned (the plan's) when the revision names none or cannot be read.
// The informer cache holds the revision unless that attempt created it a
// moment ago; only then is it read from the API server.
func (a *Applier) movedFrom(ctx context.Context, namespace, revision, planned string) string {
	cr, ok := a.cfg.Fleet.Revision(namespace, revision)
	if !ok {
		var err error
		if cr, err = a.cfg.Clients.Kube.AppsV1().ControllerRevisions(namespace).Get(ctx, revision, metav1.GetOptions{}); err != nil {
			return planned
		}
	}
	return cmp.Or(cr.Annotations[instancetype.SupersedesAnnotation], planned)
}

// targetRevision is the name of the revision a re-pin moves vm to: its
// snapshot of the target's generation, whether or not the object is still
// at that generation.
func targetRevision(vm *virtv1.VirtualMachine, t events.Target) string {
	return instancetype.RevisionName(vm.Name, &metav1.ObjectMeta{Name: t.Object.Name, UID: types.UID(t.UID), Generation: t.Generation})
}

// targetObject returns the live object to snapshot, or why there is none.
func (a *Applier) targetObject(t events.Target) (runtime.Object, string, error) {
	live := a.cfg.Fleet.Object(t.Object)
	if live == nil {
		return nil, fmt.Sprintf("%s was deleted before the VM moved", t.Object), nil
	}
	m := live.(metav1.Object)
	switch {
	case string(m.GetUID()) != t.UID:
		return nil, fmt.Sprintf("%s was re-created before the VM moved", t.Object), nil
	case m.GetGeneration() > t.Generation:
		return nil, fmt.Sprintf("superseded: %s moved on to generation %d, whose own event moves the VM", t.Object, m.GetGeneration()), nil
	case m.GetGeneration() < t.Generation:
		return nil, "", fmt.Errorf("%w: generation %d of %s is not in the cache yet", errTransient, t.Generation, t.Object)
	}
	return live.(runtime.Object), "", nil
}

// ensureRevision creates the snapshot as kvlive's (instancetype.Kvlives:
// the pruner may delete it once superseded), naming the revision it
// supersedes when there is one; finding it already there with the same
// data (an earlier attempt, or KubeVirt itself) is success.
func (a *Applier) ensureRevision(ctx context.Context, want *appsv1.ControllerRevision, supersedes string) error {
	crs := a.cfg.Clients.Kube.AppsV1().ControllerRevisions(want.Namespace)
	_, err := crs.Create(ctx, instancetype.Kvlives(want, supersedes), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create ControllerRevision %s/%s: %w", want.Namespace, want.Name, err)
		}
		return nil
	}
	existing, err := crs.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get ControllerRevision %s/%s: %w", want.Namespace, want.Name, err)
	}
	if !instancetype.SameSnapshot(existing, want) {
		return fmt.Errorf("ControllerRevision %s/%s exists with other data", want.Namespace, want.Name)
	}
	return nil
}

// currentVM reads the VM, from the cache unless fresh is set. A nil VM
// with a nil error means it is gone or was re-created under the same name.
func (a *Applier) currentVM(ctx context.Context, ref events.VMRef, fresh bool) (*virtv1.VirtualMachine, error) {
	var vm *virtv1.VirtualMachine
	if !fresh {
		vm = a.cfg.Fleet.VM(ref.Namespace, ref.Name)
	}
	if vm == nil {
		got, err := a.cfg.Clients.Virt.KubevirtV1().VirtualMachines(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: get VM %s: %w", errTransient, ref, err)
		}
		vm = got
	}
	if string(vm.UID) != ref.UID {
		return nil, nil
	}
	return vm, nil
}

func (a *Applier) vmGone(plan events.Plan, err error) (events.Outcome, error) {
	if err != nil {
		return events.Outcome{}, err
	}
	return events.Outcome{Result: events.ResultSkip, Reason: "VM was deleted (or re-created) after it was planned"}, nil
}

// replan decides the VM's plan again against the live target object.
func (a *Applier) replan(plan events.Plan, vm *virtv1.VirtualMachine) (events.Plan, error) {
	return a.replanOn(a.cfg.Fleet, plan, vm)
}

// replanOn plans vm for plan's target as the planner would, reading fleet.
func (a *Applier) replanOn(fleet Fleet, plan events.Plan, vm *virtv1.VirtualMachine) (events.Plan, error) {
	t := instancetype.Target{Target: plan.Target, Cluster: fleet.Cluster()}
	obj, skip, err := a.targetObject(plan.Target)
	if err != nil {
		return plan, err
	}
	if obj == nil {
		t.Skip = skip
	} else {
		t.Spec, _ = instancetype.SpecOf(obj)
	}
	if plan.Target.Move == events.MoveSwitch {
		t.FromRevision, t.Pin = "", ""
	}
	return instancetype.PlanVM(fleet, plan.EventID, t, vm), nil
}

// classify turns an API error into a retry (transient) or a failed outcome.
func classify(err error) (events.Outcome, bool, error) {
	if IsTransient(err) {
		return events.Outcome{}, false, fmt.Errorf("%w: %w", errTransient, err)
	}
	return failed(err), false, nil
}

// IsTransient is the one place that decides whether a failure may succeed
// on a later attempt.
func IsTransient(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, errTransient), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsConflict(err),
		apierrors.IsUnexpectedServerError(err):
		return true
	case errors.As(err, &netErr):
		return true
	}
	return false
}

func failed(err error) events.Outcome {
	return events.Outcome{Result: events.ResultFailed, Error: err.Error()}
}

func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
