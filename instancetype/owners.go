package instancetype

import (
	"encoding/json"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// FieldManager is the field manager kvlive writes VMs as: its server-side
// apply of a switch, and the managedFields entry of its patches.
const FieldManager = "kvlive"

// FieldOwners lists the managers other than kvlive that own one of paths
// of vm by server-side apply (operation Apply: Argo CD with server-side
// apply, Flux, kubectl apply --server-side), sorted: the declared owners
// of a field, whom kvlive does not overwrite unless told to force
// conflicts. A writer by update (kubectl create, edit or patch, a
// client-side apply, virt-controller) declares no ownership server-side
// apply enforces, and is not listed. A path is a field's keys from the
// object's root ("spec", "instancetype", "name").
func FieldOwners(vm *virtv1.VirtualMachine, paths ...[]string) []string {
	var owners []string
	for _, e := range vm.ManagedFields {
		if e.Operation != metav1.ManagedFieldsOperationApply || e.Manager == FieldManager || e.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if json.Unmarshal(e.FieldsV1.Raw, &set) != nil {
			continue
		}
		for _, path := range paths {
			if owns(set, path) && !slices.Contains(owners, e.Manager) {
				owners = append(owners, e.Manager)
			}
		}
	}
	slices.Sort(owners)
	return owners
}

// owns reports whether a managedFields set holds path.
func owns(set map[string]any, path []string) bool {
	for _, key := range path {
		next, ok := set["f:"+key].(map[string]any)
		if !ok {
			return false
		}
		set = next
	}
	return true
}

// WrittenPaths are the fields of vm a move to t writes: a switch's
// matcher name and kind, a re-pin's or revert's pin.
func WrittenPaths(t events.Target, pin events.PinField) [][]string {
	family := "instancetype"
	if t.Object.IsPreference() {
		family = "preference"
	}
	switch {
	case t.Move == events.MoveSwitch:
		return [][]string{{"spec", family, "name"}, {"spec", family, "kind"}}
	case pin == events.PinSpecRevisionName:
		return [][]string{{"spec", family, "revisionName"}}
	}
	return [][]string{{"status", family + "Ref", "controllerRevisionRef", "name"}}
}

// ManagedBy says who owns the fields a move writes, for a skip's reason:
// "managed by argocd-controller (spec.instancetype.name, …); kvlive switch
// --force-conflicts takes it". A re-pin or revert has no force: the VM is
// left to its owner.
func ManagedBy(owners []string, paths [][]string, move events.Move) string {
	fields := make([]string, len(paths))
	for i, p := range paths {
		fields[i] = strings.Join(p, ".")
	}
	hint := "kvlive switch --force-conflicts takes it"
	if move != events.MoveSwitch {
		hint = "kvlive leaves it to its owner"
	}
	return "managed by " + strings.Join(owners, ", ") + " (" + strings.Join(fields, ", ") + "); " + hint
}
