package instancetype

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
)

// ErrNotPinned means KubeVirt has not snapshotted the VM's reference yet.
var ErrNotPinned = errors.New("VM has no pinned revision yet")

// Pin is where a VM's reference is pinned and to which object generation.
type Pin struct {
	Revision string
	Field    events.PinField
	// Object names the instance type or preference the pin says it is
	// of: the status ref's name, or the spec's reference for the legacy
	// revisionName (a VM switched while nothing synced its status can
	// still be pinned to the object it left).
	Object string
	// UID and Generation come from the revision's labels; zero when the
	// revision is not in the cache.
	UID        string
	Generation int64
}

// PinOf reads a VM's instance type (or preference) pin. The legacy
// spec.*.revisionName takes precedence over the status ref, as in KubeVirt's
// pkg/instancetype/revision/store.go syncStatusWithMatcher.
func PinOf(vm *virtv1.VirtualMachine, preference bool) (Pin, error) {
	var revisionName, object string
	var status *virtv1.InstancetypeStatusRef
	if preference {
		if m := vm.Spec.Preference; m != nil {
			revisionName, object = m.RevisionName, m.Name
		}
		status = vm.Status.PreferenceRef
	} else {
		if m := vm.Spec.Instancetype; m != nil {
			revisionName, object = m.RevisionName, m.Name
		}
		status = vm.Status.InstancetypeRef
	}
	if revisionName != "" {
		return Pin{Revision: revisionName, Field: events.PinSpecRevisionName, Object: object}, nil
	}
	if status == nil || status.ControllerRevisionRef == nil || status.ControllerRevisionRef.Name == "" {
		return Pin{}, ErrNotPinned
	}
	return Pin{Revision: status.ControllerRevisionRef.Name, Field: events.PinStatus, Object: status.Name}, nil
}

// Involvement is what planning a few objects' VMs reads of the
// instancetype ControllerRevisions: revisions of Objects (instance type
// and preference names) and, of those, only Pins, the revisions
// (namespace/name keys) the VMs' pins and their VMIs' start revisions
// name.
type Involvement struct {
	Objects []string
	Pins    []string
}

// Lookup is what planning reads about the cluster beyond the VM itself:
// the revisions VMs are pinned to and the running instances. The process's
// informer cache implements it; tests fill it from plain maps.
type Lookup interface {
	// Revision returns the ControllerRevision namespace/name, if known.
	Revision(namespace, name string) (*appsv1.ControllerRevision, bool)
	// VMI returns the running instance of VM namespace/name, or nil.
	VMI(namespace, name string) *virtv1.VirtualMachineInstance
}

// StartLookup is a Lookup that can also read the VM spec a VMI started
// from: the ControllerRevision KubeVirt names in
// vmi.status.virtualMachineRevisionName. Lookups without it plan a VM that
// already has RestartRequired conservatively.
type StartLookup interface {
	Lookup
	// StartedSpec returns the VM spec vmi started from.
	StartedSpec(vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineSpec, error)
}

// StartedFrom reads what vmi started from: the VM template and the
// generation its pins held then (the revisions KubeVirt wrote into the
// recorded spec's revisionName fields).
func StartedFrom(l Lookup, vmi *virtv1.VirtualMachineInstance, memo *Memo) (*Started, error) {
	sl, ok := l.(StartLookup)
	if !ok {
		return nil, errors.New("this lookup cannot read VM start revisions")
	}
	spec, err := sl.StartedSpec(vmi)
	if err != nil {
		return nil, err
	}
	started := &Started{Template: spec.Template}
	for _, preference := range []bool{false, true} {
		name := ""
		if m := spec.Instancetype; !preference && m != nil {
			name = m.RevisionName
		}
		if m := spec.Preference; preference && m != nil {
			name = m.RevisionName
		}
		if name == "" {
			if (preference && spec.Preference != nil) || (!preference && spec.Instancetype != nil) {
				return nil, fmt.Errorf("the start revision %s names no pinned revision", vmi.Status.VirtualMachineRevisionName)
			}
			continue
		}
		cr, ok := l.Revision(vmi.Namespace, name)
		if !ok {
			return nil, fmt.Errorf("ControllerRevision %s/%s, pinned when the VMI started, not found", vmi.Namespace, name)
		}
		decoded, err := DecodeRevision(cr, preference)
		if err != nil {
			return nil, err
		}
		if preference {
			started.Generation.Preference = decoded.(*v1beta1.VirtualMachinePreferenceSpec)
		} else {
			started.Generation.Instancetype = decoded.(*v1beta1.VirtualMachineInstancetypeSpec)
		}
	}
	return started, nil
}

// ResolvePin fills in the pinned object's UID and generation from the
// revision's labels.
func ResolvePin(l Lookup, namespace string, p Pin) (Pin, *appsv1.ControllerRevision, error) {
	cr, ok := l.Revision(namespace, p.Revision)
	if !ok {
		return p, nil, fmt.Errorf("pinned ControllerRevision %s/%s not found", namespace, p.Revision)
	}
	p.UID = cr.Labels[instancetypeapi.ControllerRevisionObjectUIDLabel]
	p.Generation, _ = strconv.ParseInt(cr.Labels[instancetypeapi.ControllerRevisionObjectGenerationLabel], 10, 64)
	return p, cr, nil
}

// PinnedGeneration returns the generation vm is pinned to: the decoded
// instance type and preference snapshots. memo, when set, decodes each
// snapshot once for all the VMs of one event.
func PinnedGeneration(l Lookup, vm *virtv1.VirtualMachine, memo *Memo) (Generation, error) {
	var g Generation
	if vm.Spec.Instancetype != nil {
		spec, err := pinnedSpec(l, vm, false, memo)
		if err != nil {
			return g, fmt.Errorf("instance type: %w", err)
		}
		g.Instancetype = spec.(*v1beta1.VirtualMachineInstancetypeSpec)
	}
	if vm.Spec.Preference != nil {
		spec, err := pinnedSpec(l, vm, true, memo)
		if err != nil {
			return g, fmt.Errorf("preference: %w", err)
		}
		g.Preference = spec.(*v1beta1.VirtualMachinePreferenceSpec)
	}
	return g, nil
}

func pinnedSpec(l Lookup, vm *virtv1.VirtualMachine, preference bool, memo *Memo) (any, error) {
	pin, err := PinOf(vm, preference)
	if err != nil {
		return nil, err
	}
	pin, cr, err := ResolvePin(l, vm.Namespace, pin)
	if err != nil {
		return nil, err
	}
	key := ""
	if pin.UID != "" {
		key = pin.UID + "/" + strconv.FormatInt(pin.Generation, 10)
		if s, ok := memo.spec(key); ok {
			return s, nil
		}
	}
	spec, err := DecodeRevision(cr, preference)
	if err != nil {
		return nil, err
	}
	if key != "" {
		memo.storeSpec(key, spec)
	}
	return spec, nil
}

// snapshot is the part of a revision's data kvlive reads.
type snapshot struct {
	metav1.TypeMeta `json:",inline"`
	Spec            json.RawMessage `json:"spec"`
}

// DecodeRevision decodes a ControllerRevision's stored object into an
// instance type spec (*v1beta1.VirtualMachineInstancetypeSpec) or, with
// preference, a preference spec (*v1beta1.VirtualMachinePreferenceSpec).
func DecodeRevision(cr *appsv1.ControllerRevision, preference bool) (any, error) {
	raw, err := revisionRaw(cr.Data)
	if err != nil {
		return nil, fmt.Errorf("revision %s: %w", cr.Name, err)
	}
	var s snapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("revision %s: %w", cr.Name, err)
	}
	if s.APIVersion != v1beta1.SchemeGroupVersion.String() {
		return nil, fmt.Errorf("revision %s holds %q; kvlive reads %s (KubeVirt upgrades older snapshots)", cr.Name, s.APIVersion, v1beta1.SchemeGroupVersion)
	}
	return DecodeSpec(s.Spec, preference)
}

// DecodeSpec decodes a marshalled instance type or preference spec.
func DecodeSpec(raw json.RawMessage, preference bool) (any, error) {
	if preference {
		var p v1beta1.VirtualMachinePreferenceSpec
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("preference spec: %w", err)
		}
		return &p, nil
	}
	var it v1beta1.VirtualMachineInstancetypeSpec
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, fmt.Errorf("instance type spec: %w", err)
	}
	return &it, nil
}

func revisionRaw(data runtime.RawExtension) ([]byte, error) {
	if len(data.Raw) > 0 {
		return data.Raw, nil
	}
	if data.Object != nil {
		return json.Marshal(data.Object)
	}
	return nil, errors.New("empty data")
}
