package applier

import (
	"encoding/json"

	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// op is one RFC 6902 JSON patch operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// pinPath is where a pin lives in the VM, for the instance type or the preference.
func pinPath(field events.PinField, preference bool) (path string, subresource []string) {
	family := "instancetype"
	if preference {
		family = "preference"
	}
	if field == events.PinSpecRevisionName {
		return "/spec/" + family + "/revisionName", nil
	}
	return "/status/" + family + "Ref/controllerRevisionRef/name", []string{"status"}
}

// RepinPatch moves vm's pin from one revision to another, failing on the
// server if the pin is no longer from (the test-and-replace KubeVirt's
// upgrade handler uses, pkg/instancetype/upgrade/handler.go) or if the VM
// no longer references what it did when read: the patch also tests the
// matcher's name (and kind, when set) and the status ref's name (when set),
// so a VM a user switched elsewhere in between is never re-pinned to a
// snapshot of what it left.
func RepinPatch(vm *virtv1.VirtualMachine, field events.PinField, preference bool, from, to string) (patch []byte, subresource []string) {
	path, sub := pinPath(field, preference)
	family, statusName := "instancetype", ""
	if preference {
		family = "preference"
		if r := vm.Status.PreferenceRef; r != nil {
			statusName = r.Name
		}
	} else if r := vm.Status.InstancetypeRef; r != nil {
		statusName = r.Name
	}
	ops := make([]op, 0, 5)
	if m, ok := MatcherOf(vm, preference); ok {
		ops = append(ops, op{Op: "test", Path: "/spec/" + family + "/name", Value: m.Name})
		if m.Kind != "" {
			ops = append(ops, op{Op: "test", Path: "/spec/" + family + "/kind", Value: m.Kind})
		}
	}
	if statusName != "" {
		ops = append(ops, op{Op: "test", Path: "/status/" + family + "Ref/name", Value: statusName})
	}
	ops = append(ops, op{Op: "test", Path: path, Value: from}, op{Op: "replace", Path: path, Value: to})
	patch, _ = json.Marshal(ops)
	return patch, sub
}

// AsRead adds to a JSON patch of vm a test that the VM is still at the
// resourceVersion it was read at, so the write fails on a VM changed since
// in any way. A move planned for a stopped VM takes it: a start asked for
// in between (a runStrategy, a start request) could otherwise meet the
// move in virt-controller's cache the wrong way round, the VMI booting
// from the old pin and the new one then hot-plugged by a migration that no
// slot of the budget counted. A VM without a resourceVersion (never from
// an API server) is left to the patch's own tests.
func AsRead(vm *virtv1.VirtualMachine, patch []byte) []byte {
	if vm.ResourceVersion == "" {
		return patch
	}
	var ops []json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return patch
	}
	test, _ := json.Marshal(op{Op: "test", Path: "/metadata/resourceVersion", Value: vm.ResourceVersion})
	out, _ := json.Marshal(append([]json.RawMessage{test}, ops...))
	return out
}

// Matcher is the part of a VM's spec.instancetype or spec.preference a switch reads.
type Matcher struct {
	Name, Kind, RevisionName string
}

// MatcherOf reads the VM's instance type (or preference) matcher; ok is false without one.
func MatcherOf(vm *virtv1.VirtualMachine, preference bool) (m Matcher, ok bool) {
	if preference {
		if p := vm.Spec.Preference; p != nil {
			return Matcher{Name: p.Name, Kind: p.Kind, RevisionName: p.RevisionName}, true
		}
		return m, false
	}
	if it := vm.Spec.Instancetype; it != nil {
		return Matcher{Name: it.Name, Kind: it.Kind, RevisionName: it.RevisionName}, true
	}
	return m, false
}

// SwitchApply is the server-side apply configuration of a switch: the VM's
// matcher pointing at to (name and kind, the fields kvlive then owns), and
// the resourceVersion vm was read at, so the apply fails on a VM changed
// since.
func SwitchApply(vm *virtv1.VirtualMachine, preference bool, to events.Ref) []byte {
	family := "instancetype"
	if preference {
		family = "preference"
	}
	apply := map[string]any{
		"apiVersion": virtv1.GroupVersion.String(),
		"kind":       "VirtualMachine",
		"metadata":   map[string]any{"name": vm.Name, "namespace": vm.Namespace, "resourceVersion": vm.ResourceVersion},
		"spec":       map[string]any{family: map[string]any{"name": to.Name, "kind": to.Kind}},
	}
	body, _ := json.Marshal(apply)
	return body
}

// SwitchPatch points the VM's matcher at another object. It tests the
// current name (and kind when set), and drops a legacy revisionName in the
// same patch: KubeVirt's webhook rejects a new name with the old revision.
func SwitchPatch(current Matcher, preference bool, to events.Ref) []byte {
	base := "/spec/instancetype"
	if preference {
		base = "/spec/preference"
	}
	ops := []op{{Op: "test", Path: base + "/name", Value: current.Name}}
	if current.Kind != "" {
		ops = append(ops, op{Op: "test", Path: base + "/kind", Value: current.Kind})
	}
	ops = append(ops,
		op{Op: "replace", Path: base + "/name", Value: to.Name},
		op{Op: "add", Path: base + "/kind", Value: to.Kind})
	if current.RevisionName != "" {
		ops = append(ops, op{Op: "remove", Path: base + "/revisionName"})
	}
	patch, _ := json.Marshal(ops)
	return patch
}
