//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kvlive/events"
)

// TestRacesEndAsOutcomes plans two edits with only the watcher and the
// planner running, then changes the cluster under the plans before an
// applier (a second process) carries them out, as concurrent actors would:
// (a) a planned VM is deleted, (b) another VM's pin is moved to a different
// revision of the same generation, (c) the second edit's instance type is
// deleted, (d) a user switches a third VM to another instance type, which
// KubeVirt has not pinned. Each race must end as an outcome with a reason:
// skip for the deleted VM, a re-plan (and a single write to the target) for
// the moved pin, skip for every VM of the deleted instance type, skip naming
// what the switched VM references now, and no write to it.
func TestRacesEndAsOutcomes(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 3, perIT: map[string]int{itMedium: 30, itSmall: 12}})
	e.runKvlive("watcher and planner", "--stages", "watcher,planner")
	e.waitGenerations()

	medium, mediumEvent := e.editInstancetype(itMedium, 3, "6Gi")
	e.waitPlanned(mediumEvent)
	small, smallEvent := e.editInstancetype(itSmall, 2, "3Gi")
	e.waitPlanned(smallEvent)

	edited, onSmall := e.selectShapes(onInstancetype(itMedium)), e.selectShapes(onInstancetype(itSmall))
	deleted, moved, switched := edited[0], edited[1], edited[2] // running and migratable: planned live
	smallPins := e.pins(onSmall)
	e.deleteVM(deleted)
	e.movePin(moved)
	e.switchAway(switched, itGone)
	if err := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Delete(e.ctx, itSmall, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete %s: %v", itSmall, err)
	}

	e.runKvlive("applier", "--stages", "applier")
	progress := e.follow(mediumEvent)
	e.checkRollout(progress, rolloutWant{
		eventID: mediumEvent, shapes: edited, action: vmShape.expected, revision: revisionOf(medium), clean: true,
		outcome: func(s vmShape) (events.Result, string) {
			switch s {
			case deleted:
				return events.ResultSkip, "deleted"
			case moved:
				return s.expected(), "re-planned"
			case switched:
				return events.ResultSkip, "it references clusterinstancetype/" + itGone + " now"
			}
			return s.expected(), ""
		},
	})
	for _, s := range []vmShape{deleted, moved, switched} {
		o := progress.Outcomes[e.uids[s.key()]]
		t.Logf("%s: %s, wrote %v: %s", s.key(), o.Result, o.Wrote, o.Reason)
	}
	e.checkRollout(e.follow(smallEvent), rolloutWant{
		eventID: smallEvent, shapes: onSmall, action: vmShape.expected, clean: true,
		outcome: func(vmShape) (events.Result, string) { return events.ResultSkip, small.Name + " was deleted" },
	})

	remaining := append([]vmShape{moved}, edited[3:]...)
	e.waitSettled("the remaining VMs on the new generation", remaining, func(v clusterView, s vmShape) string {
		if p := pinProblem(v, s, medium); p != "" {
			return p
		}
		return standinProblem(v, s, progress.Outcomes[e.uids[s.key()]].Result, medium.Spec)
	})
	if now := e.pins(onSmall); !maps.Equal(now, smallPins) {
		t.Errorf("VMs of the deleted instance type changed pins: %v, were %v", now, smallPins)
	}
	e.checkWrites(remaining, append(onSmall, switched))
}

// itGone is an instance type no cluster has: a VM a user switched to it
// keeps its old pin, as KubeVirt leaves the status of a VM whose instance
// type it cannot find, so the VM looks as if KubeVirt had not reacted yet.
const itGone = "u1.gone"

// switchAway does what a user switching the VM by hand does: it points
// spec.instancetype at another cluster instance type.
func (e *env) switchAway(s vmShape, to string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"instancetype":{"name":%q,"kind":"VirtualMachineClusterInstancetype"}}}`, to)
	if _, err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Patch(e.ctx, s.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("switch %s to %s: %v", s.key(), to, err)
	}
}

// deleteVM deletes a VM (its VMI stays: envtest runs no garbage collector).
func (e *env) deleteVM(s vmShape) {
	e.t.Helper()
	if err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Delete(e.ctx, s.name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete VM %s: %v", s.key(), err)
	}
}

// movePin does what another actor pinning the VM would: it copies the VM's
// pinned ControllerRevision under another name (the same generation, as a
// restore or a clone leaves it) and moves the VM's status pin to the copy,
// with a JSON patch that tests the old pin.
func (e *env) movePin(s vmShape) {
	e.t.Helper()
	vm, err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Get(e.ctx, s.name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get VM %s: %v", s.key(), err)
	}
	from := vm.Status.InstancetypeRef.ControllerRevisionRef.Name
	crs := e.clients.Kube.AppsV1().ControllerRevisions(s.namespace)
	cr, err := crs.Get(e.ctx, from, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get revision %s: %v", from, err)
	}
	cp := cr.DeepCopy()
	cp.ObjectMeta = metav1.ObjectMeta{Name: from + "-restored", Namespace: cr.Namespace, Labels: cr.Labels, OwnerReferences: cr.OwnerReferences}
	if _, err := crs.Create(e.ctx, cp, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("copy revision %s: %v", from, err)
	}
	path := "/status/instancetypeRef/controllerRevisionRef/name"
	patch, _ := json.Marshal([]map[string]string{{"op": "test", "path": path, "value": from}, {"op": "replace", "path": path, "value": cp.Name}})
	if _, err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Patch(e.ctx, s.name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		e.t.Fatalf("move the pin of %s: %v", s.key(), err)
	}
}

// pins returns the revision each VM is pinned to.
func (e *env) pins(shapes []vmShape) map[string]string {
	e.t.Helper()
	v, pins := e.view(), map[string]string{}
	for _, s := range shapes {
		if vm := v.vms[s.key()]; vm != nil && vm.Status.InstancetypeRef != nil && vm.Status.InstancetypeRef.ControllerRevisionRef != nil {
			pins[s.key()] = vm.Status.InstancetypeRef.ControllerRevisionRef.Name
		}
	}
	return pins
}
