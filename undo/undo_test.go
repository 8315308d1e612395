package undo_test

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/readmodel/replay"
	"kvlive/undo"
)

// TestPlanMovesEachVMBackOrSaysWhyNot: an edit moved five stopped VMs
// from generation 1 to 2 of u1.medium. Undone, a VM whose generation 1
// revision is kept goes back to it; one whose revision is gone goes back
// to it re-created from the change's old spec; one a user pinned elsewhere,
// one deleted and one whose outcome does not say where it came from are
// skipped, each saying why.
func TestPlanMovesEachVMBackOrSaysWhyNot(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.medium", 2, "4Gi")
	gen2 := it.DeepCopy()
	gen2.Generation, gen2.Spec = 2, testenv.InstancetypeSpec(3, "6Gi")
	var objs []runtime.Object
	latest := map[string]events.Outcome{}
	moved := func(name string, keepGen1 bool) *virtv1.VirtualMachine {
		vm := testenv.VM("ns", name, "u1.medium")
		from := testenv.Pin(t, vm, it)
		if keepGen1 {
			objs = append(objs, from)
		}
		to := testenv.Pin(t, vm, gen2)
		objs = append(objs, to, vm)
		latest[string(vm.UID)] = events.Outcome{VM: events.VMRef{Namespace: "ns", Name: name, UID: string(vm.UID)}, Result: events.ResultNextBoot,
			Revision: to.Name, From: from.Name, Wrote: true}
		return vm
	}
	kept := moved("kept", true)
	gone := moved("gone", false)
	elsewhere := moved("elsewhere", true)
	elsewhere.Status.InstancetypeRef.ControllerRevisionRef.Name = "someone-elses"
	deleted := moved("deleted", true)
	objs = dropVM(objs, deleted)
	unknown := moved("unknown", true)
	o := latest[string(unknown.UID)]
	o.From = ""
	latest[string(unknown.UID)] = o
	objs = append(objs, gen2)

	oldSpec, err := json.Marshal(it.Spec)
	if err != nil {
		t.Fatal(err)
	}
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}
	orig := undo.Original{
		Record: events.Rollout{Object: ref},
		Latest: latest,
		Event:  replay.Stored{Change: &events.Changed{Object: ref, UID: string(it.UID), Generation: 2, OldGeneration: 1, OldSpec: oldSpec, NewSpec: oldSpec}},
	}
	c, err := kube.CacheOf(objs...)
	if err != nil {
		t.Fatal(err)
	}
	target, vms, plans := undo.Plan(c, "undo/1", orig)
	if target.Move != events.MoveRevert || target.Object != ref || len(vms) != 4 || len(plans) != 5 {
		t.Fatalf("Plan: target %+v, %d VMs, %d plans; want a revert of %s, 4 VMs found, 5 plans", target, len(vms), len(plans), ref)
	}
	byName := map[string]events.Plan{}
	for _, p := range plans {
		byName[p.VM.Name] = p
	}
	gen1Of := func(vm *virtv1.VirtualMachine) string { return instancetype.RevisionName(vm.Name, it) }
	if p := byName["kept"]; p.Action != events.ResultNextBoot || p.Target.Revision != gen1Of(kept) || p.Target.Generation != 1 || p.Target.Snapshot == nil {
		t.Errorf("kept: %s (%s) to %s gen %d, snapshot %t; want next-boot back to %s, with a snapshot should it be pruned before it moves",
			p.Action, p.Reason, p.Target.Revision, p.Target.Generation, p.Target.Snapshot != nil, gen1Of(kept))
	}
	p := byName["gone"]
	if p.Action != events.ResultNextBoot || p.Target.Revision != gen1Of(gone) || p.Target.Snapshot == nil {
		t.Fatalf("gone: %s (%s) to %s, snapshot %t; want next-boot back to %s re-created from the old spec", p.Action, p.Reason, p.Target.Revision, p.Target.Snapshot != nil, gen1Of(gone))
	}
	if cr, err := instancetype.RevisionFromSnapshot(gone, p.Target.Snapshot); err != nil || cr.Name != gen1Of(gone) {
		t.Errorf("gone: the snapshot re-creates %v (%v), want %s", cr, err, gen1Of(gone))
	}
	for name, want := range map[string]string{
		"elsewhere": "changed since the rollout moved it: pinned to someone-elses",
		"deleted":   "the VM was deleted since the rollout moved it",
		"unknown":   "does not say which revision it was on before",
	} {
		if p := byName[name]; p.Action != events.ResultSkip || !strings.Contains(p.Reason, want) {
			t.Errorf("%s: %s (%s), want skip saying %q", name, p.Action, p.Reason, want)
		}
	}
	for _, p := range plans {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: plan does not validate: %v", p.VM, err)
		}
	}
}

func dropVM(objs []runtime.Object, vm *virtv1.VirtualMachine) []runtime.Object {
	out := objs[:0]
	for _, o := range objs {
		if o != runtime.Object(vm) {
			out = append(out, o)
		}
	}
	return out
}
