package undo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/readmodel/replay"
	"kvlive/rollout"
)

// Source is what planning an undo reads of the cluster: the process's
// informer cache (*kube.Cache).
type Source interface {
	instancetype.Lookup
	instancetype.Objects
	VM(namespace, name string) *virtv1.VirtualMachine
	Cluster() instancetype.Cluster
}

// Original is the rollout an undo moves back: its record, the latest
// outcome of each VM, and its event as stored.
type Original struct {
	Record events.Rollout
	Latest map[string]events.Outcome
	Event  replay.Stored
}

// ErrCannotUndo marks a rollout that cannot be undone, now or ever: an
// undo, a rollout still running, an event no longer stored.
var ErrCannotUndo = errors.New("cannot undo")

// ErrUndoOfUndo refuses to undo an undo.
var ErrUndoOfUndo = fmt.Errorf("%w: an undo is not undone", ErrCannotUndo)

// Read reads what undoing eventID (a recorded event id in full) needs. It
// refuses an undo (naming the rollout it undid), a rollout still running,
// and an event no longer in the events stream.
func Read(ctx context.Context, js jetstream.JetStream, eventID string) (Original, error) {
	stored, err := replay.Select(ctx, js, replay.Selection{EventID: eventID})
	if err != nil {
		return Original{}, err
	}
	if len(stored) == 0 {
		return Original{}, fmt.Errorf("%w: event %s is no longer in the events stream (older than its --max-age): nothing to undo it by", ErrCannotUndo, eventID)
	}
	o := Original{Event: stored[len(stored)-1]}
	if o.Event.Undo != nil {
		return o, fmt.Errorf("%w: %s undid %s; to move those VMs again, roll %s out again (kvlive replay --event %s --apply)",
			ErrUndoOfUndo, eventID, o.Event.Undo.Of, o.Event.Undo.Of, o.Event.Undo.Of)
	}
	if o.Event.Restart != nil {
		return o, fmt.Errorf("%w: %s restarted VMs; a restart is not undone", ErrCannotUndo, eventID)
	}
	a, err := rollout.AccountOf(ctx, js, eventID)
	if err != nil {
		return o, err
	}
	if !a.Done() {
		return o, fmt.Errorf("%w: rollout %s is %s with %d of %d VMs settled: undo it once it has finished (kvlive rollout abort %s ends it)",
			ErrCannotUndo, eventID, a.Phase, a.Settled(), a.Planned, eventID)
	}
	o.Record, o.Latest = a.Record, a.Latest
	return o, nil
}

// Plan plans undo eventID of o over src, one plan per VM o moved, and
// returns how the VMs move back (a revert to the record's object, or a
// switch back), the VMs found and the plans.
func Plan(src Source, eventID string, o Original) (events.Target, []*virtv1.VirtualMachine, []events.Plan) {
	moved := make([]events.Outcome, 0, len(o.Latest))
	for _, out := range o.Latest {
		if out.Result.Moves() {
			moved = append(moved, out)
		}
	}
	slices.SortFunc(moved, func(a, b events.Outcome) int {
		return strings.Compare(a.VM.Namespace+"/"+a.VM.Name, b.VM.Namespace+"/"+b.VM.Name)
	})
	cluster, memo := src.Cluster(), &instancetype.Memo{}
	var back events.Ref
	var target instancetype.Target
	if s := o.Event.Switch; s != nil {
		back = s.From
		target = instancetype.SwitchTarget(src, cluster, s.To, s.From)
		target.Memo = memo
	} else {
		back = o.Record.Object
	}
	vms := make([]*virtv1.VirtualMachine, 0, len(moved))
	plans := make([]events.Plan, 0, len(moved))
	for _, out := range moved {
		vm := src.VM(out.VM.Namespace, out.VM.Name)
		if vm == nil || string(vm.UID) != out.VM.UID {
			gone := events.Target{Move: events.MoveRevert, Object: back}
			if o.Event.Switch != nil {
				gone = target.Target
			}
			plans = append(plans, events.Plan{EventID: eventID, VM: out.VM, Action: events.ResultSkip, Reason: "the VM was deleted since the rollout moved it", Target: gone})
			continue
		}
		vms = append(vms, vm)
		if o.Event.Switch != nil {
			plans = append(plans, instancetype.PlanVM(src, eventID, target, vm))
			continue
		}
		plans = append(plans, revertPlan(src, eventID, o, out, vm, cluster, memo))
	}
	if o.Event.Switch == nil {
		target.Target = events.Target{Move: events.MoveRevert, Object: back}
	}
	return target.Target, vms, plans
}

// revertPlan plans moving vm's pin back from the revision o moved it to
// (out.Revision) to the one before (out.From).
func revertPlan(src Source, eventID string, o Original, out events.Outcome, vm *virtv1.VirtualMachine, cluster instancetype.Cluster, memo *instancetype.Memo) events.Plan {
	ref := o.Record.Object
	t := instancetype.Target{Target: events.Target{Move: events.MoveRevert, Object: ref, Revision: out.From}, Memo: memo, Cluster: cluster}
	skip := func(format string, args ...any) events.Plan {
		return events.Plan{EventID: eventID, VM: out.VM, Action: events.ResultSkip, Reason: fmt.Sprintf(format, args...), Target: t.Target}
	}
	if out.From == "" {
		return skip("its outcome does not say which revision it was on before (recorded before kvlive kept it)")
	}
	if now, ok := instancetype.RefOf(vm, ref.IsPreference()); !ok || now != ref {
		what := "no " + ref.Kind
		if ok {
			what = now.String()
		}
		return skip("changed since the rollout moved it: it references %s", what)
	}
	pin, err := instancetype.PinOf(vm, ref.IsPreference())
	switch {
	case err == nil && pin.Revision == out.From:
		// Moved back already (a redelivered undo): PlanVM says none.
	case err != nil || pin.Revision != out.Revision:
		now := "no pin"
		if err == nil {
			now = pin.Revision
		}
		return skip("changed since the rollout moved it: pinned to %s, not %s", now, out.Revision)
	}
	spec, snapshot, why := before(src, o, vm, out.From, ref)
	if why != "" {
		return skip("%s", why)
	}
	t.Spec, t.Snapshot = spec, snapshot
	t.UID, t.Generation = uidAndGeneration(vm.Name, ref, out.From)
	plan := instancetype.PlanVM(src, eventID, t, vm)
	// A skip on a cache that may be behind is final here: the applier's
	// recheck plans against the object's live generation, not a revision.
	plan.Recheck = false
	return plan
}

// before is the spec the VM was pinned to before, from the revision, and
// the snapshot to re-create the revision from should it be gone by the
// time the VM moves (pruned meanwhile): the change's old spec, when it is
// that generation. With neither, why says so.
func before(src Source, o Original, vm *virtv1.VirtualMachine, revision string, ref events.Ref) (spec any, snapshot []byte, why string) {
	snapshot, recorded := recordedSnapshot(o, vm, revision, ref)
	if cr, ok := src.Revision(vm.Namespace, revision); ok {
		spec, err := instancetype.DecodeRevision(cr, ref.IsPreference())
		if err != nil {
			return nil, nil, err.Error()
		}
		return spec, snapshot, ""
	}
	if snapshot == nil {
		return nil, nil, fmt.Sprintf("revision %s is gone and the rollout's record holds no snapshot of it", revision)
	}
	return recorded, snapshot, ""
}

// recordedSnapshot is vm's revision of the change's old generation, built
// from the spec the change recorded, with that spec; nil when the change
// recorded none or revision is of another generation.
func recordedSnapshot(o Original, vm *virtv1.VirtualMachine, revision string, ref events.Ref) ([]byte, any) {
	c := o.Event.Change
	uid, generation := uidAndGeneration(vm.Name, ref, revision)
	if c == nil || len(c.OldSpec) == 0 || c.UID != uid || c.OldGeneration != generation {
		return nil, nil
	}
	spec, err := instancetype.DecodeSpec(c.OldSpec, ref.IsPreference())
	if err != nil {
		return nil, nil
	}
	raw, err := instancetype.Snapshot(vm, objectAt(ref, types.UID(uid), generation, spec))
	if err != nil {
		return nil, nil
	}
	return raw, spec
}

// uidAndGeneration reads the object UID and generation from the name of
// vm's revision of ref as KubeVirt makes it
// (<vm>-<object>-<version>-<uid>-<generation>, instancetype.RevisionName).
func uidAndGeneration(vm string, ref events.Ref, revision string) (string, int64) {
	rest, ok := strings.CutPrefix(revision, vm+"-"+ref.Name+"-"+v1beta1.SchemeGroupVersion.Version+"-")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i < 0 {
		return "", 0
	}
	g, _ := strconv.ParseInt(rest[i+1:], 10, 64)
	return rest[:i], g
}

// objectAt is the object ref names at one generation with spec.
func objectAt(ref events.Ref, uid types.UID, generation int64, spec any) runtime.Object {
	meta := metav1.ObjectMeta{Name: ref.Name, Namespace: ref.Namespace, UID: uid, Generation: generation}
	switch ref.Kind {
	case events.KindInstancetype:
		return &v1beta1.VirtualMachineInstancetype{ObjectMeta: meta, Spec: *spec.(*v1beta1.VirtualMachineInstancetypeSpec)}
	case events.KindClusterInstancetype:
		meta.Namespace = ""
		return &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: meta, Spec: *spec.(*v1beta1.VirtualMachineInstancetypeSpec)}
	case events.KindPreference:
		return &v1beta1.VirtualMachinePreference{ObjectMeta: meta, Spec: *spec.(*v1beta1.VirtualMachinePreferenceSpec)}
	}
	meta.Namespace = ""
	return &v1beta1.VirtualMachineClusterPreference{ObjectMeta: meta, Spec: *spec.(*v1beta1.VirtualMachinePreferenceSpec)}
}
