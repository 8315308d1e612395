package instancetype

import (
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// InstancetypeRef is the instance type vm references, if any. An empty kind
// means the cluster-scoped kind, as in KubeVirt's pkg/instancetype/find.
func InstancetypeRef(vm *virtv1.VirtualMachine) (events.Ref, bool) {
	m := vm.Spec.Instancetype
	if m == nil || m.Name == "" {
		return events.Ref{}, false
	}
	return matcherRef(m.Kind, m.Name, vm.Namespace, false)
}

// PreferenceRef is the preference vm references, if any.
func PreferenceRef(vm *virtv1.VirtualMachine) (events.Ref, bool) {
	m := vm.Spec.Preference
	if m == nil || m.Name == "" {
		return events.Ref{}, false
	}
	return matcherRef(m.Kind, m.Name, vm.Namespace, true)
}

// RefOf is the instance type, or with preference the preference, vm references.
func RefOf(vm *virtv1.VirtualMachine, preference bool) (events.Ref, bool) {
	if preference {
		return PreferenceRef(vm)
	}
	return InstancetypeRef(vm)
}

func matcherRef(kind, name, namespace string, preference bool) (events.Ref, bool) {
	k, err := events.NormalizeKind(kind, preference)
	if err != nil {
		return events.Ref{}, false
	}
	r := events.Ref{Kind: k, Name: name}
	if !r.IsClusterScoped() {
		r.Namespace = namespace
	}
	return r, true
}

// RefKeys are the events.Ref keys of every instance type and preference vm
// references: what an informer index files the VM under.
func RefKeys(vm *virtv1.VirtualMachine) []string {
	var keys []string
	if r, ok := InstancetypeRef(vm); ok {
		keys = append(keys, r.Key())
	}
	if r, ok := PreferenceRef(vm); ok {
		keys = append(keys, r.Key())
	}
	return keys
}
