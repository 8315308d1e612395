package instancetype

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

// Generation is one generation of what a VM refers to: the instance type
// spec and the preference spec (either may be nil).
type Generation struct {
	Instancetype *v1beta1.VirtualMachineInstancetypeSpec
	Preference   *v1beta1.VirtualMachinePreferenceSpec
}

// view is the part of a VM's expanded spec that an instance type or
// preference decides, flattened to comparable values.
type view struct {
	sockets, cores, threads uint32
	// maxSockets and maxGuest are only the explicitly configured limits (VM
	// or instance type); defaults are computed on the VMI at start.
	maxSockets uint32
	guest      *resource.Quantity
	maxGuest   *resource.Quantity
	// other holds every remaining field as canonical JSON, keyed by the
	// field name used in plan output (e.g. "cpu.model", "gpus").
	other map[string]string
	// nextBoot fields only reach the VMI at its next start: instance type
	// annotations go to the VMI's metadata, which the controller's restart
	// check (syncRestartRequired) does not compare.
	nextBoot map[string]string
}

// Fields the view models explicitly; everything else in the specs is
// compared generically.
var explicitInstancetypeFields = []string{"cpu.guest", "cpu.maxSockets", "memory.guest", "memory.maxGuest", "annotations"}

// Memo remembers the flattened fields of the instance type and preference
// specs one event's VMs share, so planning 10,000 VMs flattens each
// generation once instead of twice per VM. Use one per event (specs are
// keyed by pointer, so it must not outlive them); the zero value is ready;
// it is not safe for concurrent use.
type Memo struct {
	flat map[any]map[string]string
	// specs holds decoded snapshots by object UID and generation: every VM
	// pinned to one generation shares one.
	specs map[string]any
}

func (m *Memo) spec(key string) (any, bool) {
	if m == nil {
		return nil, false
	}
	s, ok := m.specs[key]
	return s, ok
}

func (m *Memo) storeSpec(key string, spec any) {
	if m == nil {
		return
	}
	if m.specs == nil {
		m.specs = map[string]any{}
	}
	m.specs[key] = spec
}

func (m *Memo) flatten(prefix string, obj any, skip []string) map[string]string {
	if m == nil {
		out := map[string]string{}
		flatten(prefix, obj, out, skip)
		return out
	}
	if f, ok := m.flat[obj]; ok {
		return f
	}
	if m.flat == nil {
		m.flat = map[any]map[string]string{}
	}
	out := map[string]string{}
	flatten(prefix, obj, out, skip)
	m.flat[obj] = out
	return out
}

// expand applies gen to vm the way pkg/instancetype/apply does, keeping only
// what a generation can change.
func expand(vm *virtv1.VirtualMachine, gen Generation, memo *Memo) view {
	v := view{other: map[string]string{}, nextBoot: map[string]string{}}
	domain := virtv1.DomainSpec{}
	if vm.Spec.Template != nil {
		domain = vm.Spec.Template.Spec.Domain
	}
	if c := domain.CPU; c != nil {
		v.sockets, v.cores, v.threads, v.maxSockets = c.Sockets, c.Cores, c.Threads, c.MaxSockets
	}
	if m := domain.Memory; m != nil {
		v.guest, v.maxGuest = m.Guest, m.MaxGuest
	}
	if it := gen.Instancetype; it != nil {
		// pkg/instancetype/apply/cpu.go applyCPU / applyGuestCPUTopology.
		v.sockets, v.cores, v.threads = topology(it.CPU.Guest, gen.Preference)
		if it.CPU.MaxSockets != nil {
			v.maxSockets = *it.CPU.MaxSockets
		}
		// pkg/instancetype/apply/memory.go applyMemory.
		guest := it.Memory.Guest.DeepCopy()
		v.guest = &guest
		if it.Memory.MaxGuest != nil {
			v.maxGuest = it.Memory.MaxGuest
		}
		maps.Copy(v.other, memo.flatten("", it, explicitInstancetypeFields))
		if pct := it.Memory.OvercommitPercent; pct > 0 {
			// Derived: the memory request is the guest memory less the
			// overcommit, computed as pkg/instancetype/apply/memory.go does
			// (float32), so a guest change under overcommit also changes a
			// field that is not live-updatable.
			req := int64(float32(guest.Value()) * (1 - float32(pct)/100))
			v.other["resources.requests.memory"] = resource.NewQuantity(req, guest.Format).String()
		}
		if len(it.Annotations) > 0 {
			v.nextBoot["annotations"] = canonical(it.Annotations)
		}
	}
	if p := gen.Preference; p != nil {
		// The preferred topology is already folded into sockets/cores/threads;
		// every other preferred value counts only where it reaches the VM.
		spec := virtv1.VirtualMachineInstanceSpec{}
		if vm.Spec.Template != nil {
			spec = vm.Spec.Template.Spec
		}
		maps.Copy(v.other, preferenceEffect(&spec, p))
		if len(p.Annotations) > 0 {
			v.nextBoot["preference.annotations"] = canonical(p.Annotations)
		}
	}
	return v
}

// topology turns vCPUs into sockets, cores and threads per the preference's
// preferredCPUTopology (pkg/instancetype/apply/cpu.go applyGuestCPUTopology,
// pkg/instancetype/preference/apply/cpu.go GetPreferredTopology, GetSpreadOptions).
func topology(vCPUs uint32, pref *v1beta1.VirtualMachinePreferenceSpec) (sockets, cores, threads uint32) {
	sockets, cores, threads = 1, 1, 1
	if vCPUs <= 1 {
		return
	}
	preferred := v1beta1.Sockets
	if pref != nil && pref.CPU != nil && pref.CPU.PreferredCPUTopology != nil {
		preferred = *pref.CPU.PreferredCPUTopology
	}
	switch preferred {
	case v1beta1.Cores, v1beta1.DeprecatedPreferCores:
		cores = vCPUs
	case v1beta1.Threads, v1beta1.DeprecatedPreferThreads:
		threads = vCPUs
	case v1beta1.Spread, v1beta1.DeprecatedPreferSpread:
		ratio, across := spreadOptions(pref)
		switch across {
		case v1beta1.SpreadAcrossSocketsCores:
			cores, sockets = ratio, vCPUs/ratio
		case v1beta1.SpreadAcrossCoresThreads:
			threads, cores = ratio, vCPUs/ratio
		case v1beta1.SpreadAcrossSocketsCoresThreads:
			const threadsPerCore = 2
			threads, cores, sockets = threadsPerCore, ratio, vCPUs/threadsPerCore/ratio
		}
	default: // sockets, any, and their deprecated spellings
		sockets = vCPUs
	}
	return
}

func spreadOptions(pref *v1beta1.VirtualMachinePreferenceSpec) (uint32, v1beta1.SpreadAcross) {
	ratio, across := uint32(2), v1beta1.SpreadAcrossSocketsCores
	if pref.PreferSpreadSocketToCoreRatio != 0 {
		ratio = pref.PreferSpreadSocketToCoreRatio
	}
	if pref.CPU != nil && pref.CPU.SpreadOptions != nil {
		if a := pref.CPU.SpreadOptions.Across; a != nil {
			across = *a
		}
		if r := pref.CPU.SpreadOptions.Ratio; r != nil {
			ratio = *r
		}
	}
	return ratio, across
}

// flatten writes obj's JSON fields into out as "prefix.a.b" → canonical JSON,
// descending one level into objects so a change names the field that moved
// (cpu.model, not cpu). Fields listed in skip are left out.
func flatten(prefix string, obj any, out map[string]string, skip []string) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return
	}
	for k, val := range top {
		var inner map[string]json.RawMessage
		if json.Unmarshal(val, &inner) == nil && len(inner) > 0 && k != "nodeSelector" && k != "annotations" {
			for ik, iv := range inner {
				if name := k + "." + ik; !slices.Contains(skip, name) {
					out[prefix+name] = string(iv)
				}
			}
			continue
		}
		if !slices.Contains(skip, k) {
			out[prefix+k] = string(val)
		}
	}
}

func canonical(m map[string]string) string {
	b, _ := json.Marshal(m) // maps marshal with sorted keys
	return string(b)
}

// diffKeys lists the keys whose values differ between a and b, sorted.
func diffKeys(a, b map[string]string) []string {
	keys := map[string]bool{}
	for k := range maps.Keys(a) {
		keys[k] = true
	}
	for k := range maps.Keys(b) {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if a[k] != b[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func display(s string) string {
	if s == "" {
		return "(unset)"
	}
	return strings.Trim(s, `"`)
}
