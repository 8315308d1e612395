package offline

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/labels"

	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
)

// Fleet is what planning reads: the process's informer cache, over a
// cluster or over the objects of a file.
type Fleet interface {
	instancetype.Lookup
	instancetype.Objects
	// Referencing returns the VMs that reference ref, narrowed to a
	// namespace ("" for all) and a label selector (nil for all).
	Referencing(ref events.Ref, namespace string, selector labels.Selector) ([]*virtv1.VirtualMachine, error)
	// Cluster is the KubeVirt CR's live-update configuration.
	Cluster() instancetype.Cluster
}

// Request is the change to evaluate and the VMs to evaluate it on.
type Request struct {
	// Object is the instance type or preference whose current generation
	// the VMs would move to (a re-pin), unless From is set.
	Object events.Ref
	// From, when set, makes the request a switch from From to Object.
	From *events.Ref
	// Namespace limits the VMs to one namespace; "" means all.
	Namespace string
	Selector  labels.Selector
	// ForceConflicts plans a switch that takes the reference from the
	// managers that own it by server-side apply (switch --force-conflicts).
	ForceConflicts bool
}

// Involved is what planning req reads of the revisions: those of the
// object the VMs are moved from (or re-pinned on), of every instance type
// and preference those VMs reference or are pinned to and, for a running
// VM with RestartRequired, of those its VMI started from (its start
// revision, read once); and of them only the ones those pins name, never
// the superseded generations no VM is pinned to.
func Involved(f Fleet, req Request) instancetype.Involvement {
	source := req.Object
	if req.From != nil {
		source = *req.From
	}
	vms, _ := f.Referencing(source, req.Namespace, req.Selector)
	objects, pins := map[string]bool{source.Name: true}, map[string]bool{}
	starts, _ := f.(instancetype.StartLookup)
	for _, vm := range vms {
		for _, preference := range []bool{false, true} {
			if ref, ok := instancetype.RefOf(vm, preference); ok {
				objects[ref.Name] = true
			}
			if pin, err := instancetype.PinOf(vm, preference); err == nil {
				if pin.Object != "" {
					objects[pin.Object] = true
				}
				pins[vm.Namespace+"/"+pin.Revision] = true
			}
		}
		if _, ok := instancetype.RestartRequired(vm); !ok || starts == nil {
			continue
		}
		if vmi := f.VMI(vm.Namespace, vm.Name); vmi != nil && !vmi.IsFinal() {
			if spec, err := starts.StartedSpec(vmi); err == nil {
				involve := func(object, revision string) {
					objects[object] = true
					if revision != "" {
						pins[vm.Namespace+"/"+revision] = true
					}
				}
				if m := spec.Instancetype; m != nil {
					involve(m.Name, m.RevisionName)
				}
				if m := spec.Preference; m != nil {
					involve(m.Name, m.RevisionName)
				}
			}
		}
	}
	return instancetype.Involvement{Objects: slices.Sorted(maps.Keys(objects)), Pins: slices.Sorted(maps.Keys(pins))}
}

// Plan decides, for every VM the request reaches, what KubeVirt would do.
// Nothing is written. Plans are sorted by namespace and name.
func Plan(f Fleet, req Request) ([]events.Plan, error) {
	source, target := req.Object, instancetype.CurrentTarget(f, f.Cluster(), req.Object)
	if req.From != nil {
		if req.From.IsPreference() != req.Object.IsPreference() {
			return nil, fmt.Errorf("cannot switch between an instance type and a preference")
		}
		source, target = *req.From, instancetype.SwitchTarget(f, f.Cluster(), *req.From, req.Object)
		target.Force = req.ForceConflicts
	}
	if _, ok := instancetype.SpecOf(f.Object(req.Object)); !ok {
		// A preview of a typo must not look like a plan of nothing.
		return nil, fmt.Errorf("%s does not exist", req.Object)
	}
	vms, err := f.Referencing(source, req.Namespace, req.Selector)
	if err != nil {
		return nil, err
	}
	if _, ok := instancetype.SpecOf(f.Object(source)); !ok && len(vms) == 0 {
		return nil, fmt.Errorf("%s does not exist and no VM references it", source)
	}
	id := "plan/" + target.Object.String()
	plans := make([]events.Plan, 0, len(vms))
	for _, vm := range vms {
		plans = append(plans, instancetype.PlanVM(f, id, target, vm))
	}
	sort.Slice(plans, func(i, j int) bool {
		if plans[i].VM.Namespace != plans[j].VM.Namespace {
			return plans[i].VM.Namespace < plans[j].VM.Namespace
		}
		return plans[i].VM.Name < plans[j].VM.Name
	})
	return plans, nil
}
