package kube

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/instancetype"
)

// An object decoded into its Go type costs more than its content: a
// VirtualMachine's template is a 1,000-byte struct before any field is
// set, a VirtualMachineInstance 1,528 bytes, a ControllerRevision 312,
// most of it for fields kvlive never reads or that are never set. A
// trimmed cache (NewCache) therefore keeps each VM, VMI and instancetype
// ControllerRevision in a stored form, storedVM, storedVMI and
// storedRevision, and hands out typed objects rebuilt from it on every
// read (the cache's VM, VMI, VMs, Referencing, Revision and
// OwnedRevisions); the informers' handlers get the stored forms, which
// carry the object's metadata for keys (meta.Accessor), and RevisionOf
// reads a revision from one. docs/performance.md measures it.

// storedVM is a cached VM: its metadata and the fields of its spec and
// status that VMs as KubeVirt manages them set, in one struct rather than
// the VirtualMachine's 552 bytes and the five small structs its
// references point to, and its template as JSON, decoded when the VM is
// read. A VM with anything else set (a data volume template kept, a state
// change request, a reference inferred from a volume) is kept as it is,
// typed, beside its template: storeVM never loses a field.
type storedVM struct {
	meta metav1.ObjectMeta
	// kinded is a type meta of kubevirt.io/v1 VirtualMachine (a fake
	// clientset's; client-go clears it as it decodes).
	kinded                   bool
	running                  optionalBool
	hasRunStrategy           bool
	created, ready           bool
	refs                     refBits
	runStrategy              virtv1.VirtualMachineRunStrategy
	instancetype, preference storedRef
	printableStatus          virtv1.VirtualMachinePrintableStatus
	statusRunStrategy        virtv1.VirtualMachineRunStrategy
	conditions               []virtv1.VirtualMachineCondition
	observedGeneration       int64
	desiredGeneration        int64
	// instancetypeRef and preferenceRef are the status's pins.
	instancetypeRef, preferenceRef storedRef
	template                       []byte
	// typed is the VM (without its template) when it holds more than the
	// fields above, which are then unset.
	typed *virtv1.VirtualMachine
}

// storedRef is a spec's instance type or preference matcher, or a status's
// pin: its name, kind and revision name (a pin's ControllerRevisionRef).
type storedRef struct {
	name, kind, revisionName string
}

// refBits says which of a storedVM's references are set: the spec's
// matchers, the status's pins and their ControllerRevisionRefs (a byte,
// not two bools a reference, which would take the struct past a size
// class of the allocator: 576 bytes, not 640).
type refBits uint8

const (
	specInstancetype refBits = 1 << iota
	specPreference
	pinInstancetype
	pinInstancetypeRevision
	pinPreference
	pinPreferenceRevision
)

// GetObjectMeta makes a storedVM an object to client-go's key functions.
func (s *storedVM) GetObjectMeta() metav1.Object {
	if s.typed != nil {
		return &s.typed.ObjectMeta
	}
	return &s.meta
}

// vmTypeMeta is the type meta a kinded VM has.
var vmTypeMeta = metav1.TypeMeta{APIVersion: virtv1.GroupVersion.String(), Kind: "VirtualMachine"}

// storeVM keeps vm, a trimmed VM the cache now owns, in its stored form.
func storeVM(vm *virtv1.VirtualMachine) (*storedVM, error) {
	var template []byte
	if t := vm.Spec.Template; t != nil {
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, fmt.Errorf("kube: VM %s/%s: template: %w", vm.Namespace, vm.Name, err)
		}
		template = raw
		vm.Spec.Template = nil
	}
	if s, ok := compactVM(vm); ok {
		s.template = template
		return s, nil
	}
	return &storedVM{typed: vm, template: template}, nil
}

// compactVM is vm, without its template, as a storedVM's fields, or false
// when it holds more than they keep.
func compactVM(vm *virtv1.VirtualMachine) (*storedVM, bool) {
	spec, st := vm.Spec, vm.Status
	s := &storedVM{
		meta: vm.ObjectMeta, kinded: vm.TypeMeta == vmTypeMeta, running: optional(spec.Running),
		created: st.Created, ready: st.Ready, printableStatus: st.PrintableStatus, statusRunStrategy: st.RunStrategy,
		conditions: st.Conditions, observedGeneration: st.ObservedGeneration, desiredGeneration: st.DesiredGeneration,
	}
	if spec.RunStrategy != nil {
		s.hasRunStrategy, s.runStrategy = true, *spec.RunStrategy
	}
	ok := s.kinded || vm.TypeMeta == (metav1.TypeMeta{})
	if m := spec.Instancetype; m != nil {
		s.refs |= specInstancetype
		s.instancetype = storedRef{name: m.Name, kind: m.Kind, revisionName: m.RevisionName}
		rest := *m
		rest.Name, rest.Kind, rest.RevisionName = "", "", ""
		ok = ok && reflect.ValueOf(rest).IsZero()
	}
	if m := spec.Preference; m != nil {
		s.refs |= specPreference
		s.preference = storedRef{name: m.Name, kind: m.Kind, revisionName: m.RevisionName}
		rest := *m
		rest.Name, rest.Kind, rest.RevisionName = "", "", ""
		ok = ok && reflect.ValueOf(rest).IsZero()
	}
	ok = s.storePin(&s.instancetypeRef, st.InstancetypeRef, pinInstancetype, pinInstancetypeRevision) && ok
	ok = s.storePin(&s.preferenceRef, st.PreferenceRef, pinPreference, pinPreferenceRevision) && ok
	// What is left once the fields above are taken must be unset.
	spec.Running, spec.RunStrategy, spec.Instancetype, spec.Preference = nil, nil, nil, nil
	st.Created, st.Ready, st.PrintableStatus, st.RunStrategy, st.Conditions = false, false, "", "", nil
	st.ObservedGeneration, st.DesiredGeneration, st.InstancetypeRef, st.PreferenceRef = 0, 0, nil, nil
	if !ok || !reflect.ValueOf(spec).IsZero() || !reflect.ValueOf(st).IsZero() {
		return nil, false
	}
	return s, true
}

// storePin keeps the status pin r, if any, in to, marking it set (and
// its ControllerRevisionRef with revision), and returns false when r
// holds more than a storedRef keeps.
func (s *storedVM) storePin(to *storedRef, r *virtv1.InstancetypeStatusRef, set, revision refBits) bool {
	if r == nil {
		return true
	}
	s.refs |= set
	*to = storedRef{name: r.Name, kind: r.Kind}
	rest := *r
	rest.Name, rest.Kind, rest.ControllerRevisionRef = "", "", nil
	if c := r.ControllerRevisionRef; c != nil {
		s.refs |= revision
		to.revisionName = c.Name
		cRest := *c
		cRest.Name = ""
		if !reflect.ValueOf(cRest).IsZero() {
			return false
		}
	}
	// Whatever else a pin holds (inferred from a volume) keeps the VM typed.
	return reflect.ValueOf(rest).IsZero()
}

// withoutTemplate is the VM as it was stored, without its template, in a
// struct of its own that shares everything else with the stored one.
func (s *storedVM) withoutTemplate() *virtv1.VirtualMachine {
	vm := new(virtv1.VirtualMachine)
	s.fillWithoutTemplate(vm, nil)
	return vm
}

// fillWithoutTemplate sets vm to the VM as it was stored, without its
// template, sharing everything else with the stored one; the small structs
// its references point to are refs' (nil: allocated).
func (s *storedVM) fillWithoutTemplate(vm *virtv1.VirtualMachine, refs *vmRefs) {
	if s.typed != nil {
		*vm = *s.typed
		return
	}
	*vm = virtv1.VirtualMachine{ObjectMeta: s.meta}
	if s.kinded {
		vm.TypeMeta = vmTypeMeta
	}
	spec, st := &vm.Spec, &vm.Status
	spec.Running = s.running.pointer()
	if s.hasRunStrategy {
		spec.RunStrategy = &s.runStrategy
	}
	if r := s.instancetype; s.refs&specInstancetype != 0 {
		spec.Instancetype = refs.instancetype(virtv1.InstancetypeMatcher{Name: r.name, Kind: r.kind, RevisionName: r.revisionName})
	}
	if r := s.preference; s.refs&specPreference != 0 {
		spec.Preference = refs.preference(virtv1.PreferenceMatcher{Name: r.name, Kind: r.kind, RevisionName: r.revisionName})
	}
	st.Created, st.Ready, st.PrintableStatus, st.RunStrategy, st.Conditions = s.created, s.ready, s.printableStatus, s.statusRunStrategy, s.conditions
	st.ObservedGeneration, st.DesiredGeneration = s.observedGeneration, s.desiredGeneration
	st.InstancetypeRef = s.pin(s.instancetypeRef, pinInstancetype, pinInstancetypeRevision, refs, 0)
	st.PreferenceRef = s.pin(s.preferenceRef, pinPreference, pinPreferenceRevision, refs, 1)
}

// pin is r as a status pin (refs' pin i), or nil when unset.
func (s *storedVM) pin(r storedRef, set, revision refBits, refs *vmRefs, i int) *virtv1.InstancetypeStatusRef {
	if s.refs&set == 0 {
		return nil
	}
	p := refs.pin(i, virtv1.InstancetypeStatusRef{Name: r.name, Kind: r.kind})
	if s.refs&revision != 0 {
		p.ControllerRevisionRef = refs.revision(i, virtv1.ControllerRevisionRef{Name: r.revisionName})
	}
	return p
}

// vmRefs are the small structs a VM read without its template points to,
// kept beside a VM that is filled again and again (a scan of the fleet:
// Cache.VMsWithoutTemplates), so that no read allocates them. A nil
// vmRefs allocates each.
type vmRefs struct {
	instancetypeM virtv1.InstancetypeMatcher
	preferenceM   virtv1.PreferenceMatcher
	pins          [2]virtv1.InstancetypeStatusRef
	revisions     [2]virtv1.ControllerRevisionRef
}

func (x *vmRefs) instancetype(m virtv1.InstancetypeMatcher) *virtv1.InstancetypeMatcher {
	if x == nil {
		return &m
	}
	x.instancetypeM = m
	return &x.instancetypeM
}

func (x *vmRefs) preference(m virtv1.PreferenceMatcher) *virtv1.PreferenceMatcher {
	if x == nil {
		return &m
	}
	x.preferenceM = m
	return &x.preferenceM
}

func (x *vmRefs) pin(i int, p virtv1.InstancetypeStatusRef) *virtv1.InstancetypeStatusRef {
	if x == nil {
		return &p
	}
	x.pins[i] = p
	return &x.pins[i]
}

func (x *vmRefs) revision(i int, c virtv1.ControllerRevisionRef) *virtv1.ControllerRevisionRef {
	if x == nil {
		return &c
	}
	x.revisions[i] = c
	return &x.revisions[i]
}

// object is the VM as it was stored, its template decoded, sharing
// everything else with the stored one (callers must not mutate it, as
// with any informer object). A template that does not decode, which one
// json.Marshal wrote cannot be, is reported through client-go's error
// handlers (logged) and left out.
func (s *storedVM) object() *virtv1.VirtualMachine {
	vm := s.withoutTemplate()
	if s.template != nil {
		t := &virtv1.VirtualMachineInstanceTemplateSpec{}
		if err := json.Unmarshal(s.template, t); err != nil {
			utilruntime.HandleError(fmt.Errorf("kube: VM %s/%s: the cached template does not decode, read without it: %w", vm.Namespace, vm.Name, err))
		} else {
			vm.Spec.Template = t
		}
	}
	return vm
}

// storedVMI is a cached VMI: of its spec and status only the fields
// instancetype.TrimVMI keeps, which is all kvlive reads of a VMI.
type storedVMI struct {
	typ          metav1.TypeMeta
	meta         metav1.ObjectMeta
	architecture string
	cpu          *virtv1.CPU
	memory       *virtv1.Memory
	phase        virtv1.VirtualMachineInstancePhase
	conditions   []virtv1.VirtualMachineInstanceCondition
	memoryStatus *virtv1.MemoryStatus
	topology     *virtv1.CPUTopology
	migration    *virtv1.VirtualMachineInstanceMigrationState
	revisionName string
}

// GetObjectMeta makes a storedVMI an object to client-go's key functions.
func (s *storedVMI) GetObjectMeta() metav1.Object { return &s.meta }

// storeVMI keeps vmi, trimmed (instancetype.TrimVMI), in its stored form.
func storeVMI(vmi *virtv1.VirtualMachineInstance) *storedVMI {
	st := &vmi.Status
	return &storedVMI{
		typ: vmi.TypeMeta, meta: vmi.ObjectMeta, architecture: vmi.Spec.Architecture,
		cpu: vmi.Spec.Domain.CPU, memory: vmi.Spec.Domain.Memory,
		phase: st.Phase, conditions: st.Conditions, memoryStatus: st.Memory, topology: st.CurrentCPUTopology,
		migration: st.MigrationState, revisionName: st.VirtualMachineRevisionName,
	}
}

// object is the VMI as instancetype.TrimVMI left it.
func (s *storedVMI) object() *virtv1.VirtualMachineInstance {
	vmi := &virtv1.VirtualMachineInstance{TypeMeta: s.typ, ObjectMeta: s.meta, Status: s.status()}
	vmi.Spec.Architecture = s.architecture
	vmi.Spec.Domain.CPU, vmi.Spec.Domain.Memory = s.cpu, s.memory
	return vmi
}

// status is the VMI's status as it was stored.
func (s *storedVMI) status() virtv1.VirtualMachineInstanceStatus {
	return virtv1.VirtualMachineInstanceStatus{
		Phase: s.phase, Conditions: s.conditions, Memory: s.memoryStatus, CurrentCPUTopology: s.topology,
		MigrationState: s.migration, VirtualMachineRevisionName: s.revisionName,
	}
}

// asVM is the VM an informer holds as obj, stored or typed (a CacheOf's,
// a whole cache's), or nil.
func asVM(obj any) *virtv1.VirtualMachine {
	switch o := obj.(type) {
	case *storedVM:
		return o.object()
	case *virtv1.VirtualMachine:
		return o
	}
	return nil
}

// asVMI is the VMI an informer holds as obj, stored or typed, or nil.
func asVMI(obj any) *virtv1.VirtualMachineInstance {
	switch o := obj.(type) {
	case *storedVMI:
		return o.object()
	case *virtv1.VirtualMachineInstance:
		return o
	}
	return nil
}

// storedRevision is a cached ControllerRevision as KubeVirt and kvlive
// make them: the metadata they set (one controller owner kept inline, not
// in a slice of its own), the snapshot (shared with equal ones, intern)
// and the revision number; not its type meta, which client-go clears as
// it decodes (a fake clientset sets it). A revision with any other
// metadata (more owners, finalizers, a deletion under way) stays typed
// (storeRevision).
type storedRevision struct {
	name, namespace, resourceVersion string
	uid                              types.UID
	created                          metav1.Time
	labels                           map[string]string
	// supersedes is the annotation every revision kvlive creates carries
	// and no other revision shares: the name of the one it superseded
	// (instancetype.SupersedesAnnotation). In a map of its own it cost
	// each revision some 190 bytes more (BenchmarkCachedHeapPerVM), and
	// each such map filled the pool of shared ones. annotations are the
	// others, shared with equal ones (intern).
	supersedes  string
	annotations map[string]string
	owner       storedOwner
	data        []byte
	revision    int64
}

// storedOwner is a revision's one owner reference, if any (kind set).
type storedOwner struct {
	apiVersion, kind, name    string
	uid                       types.UID
	controller, blockDeletion optionalBool
}

// optionalBool is a *bool kept in a byte: unset, false or true.
type optionalBool uint8

const (
	unset optionalBool = iota
	isFalse
	isTrue
)

func optional(b *bool) optionalBool {
	switch {
	case b == nil:
		return unset
	case *b:
		return isTrue
	}
	return isFalse
}

func (o optionalBool) pointer() *bool {
	if o == unset {
		return nil
	}
	b := o == isTrue
	return &b
}

// storeRevision keeps cr, a revision the cache now owns, in its stored
// form, or returns it as it is when its metadata holds more than the
// stored form keeps.
func storeRevision(cr *appsv1.ControllerRevision) any {
	m := &cr.ObjectMeta
	if cr.Data.Object != nil || len(m.OwnerReferences) > 1 || (len(m.OwnerReferences) == 1 && m.OwnerReferences[0].Kind == "") ||
		m.GenerateName != "" || m.Generation != 0 || m.DeletionTimestamp != nil ||
		m.DeletionGracePeriodSeconds != nil || len(m.Finalizers) > 0 || len(m.ManagedFields) > 0 {
		return cr
	}
	s := &storedRevision{
		name: m.Name, namespace: m.Namespace, resourceVersion: m.ResourceVersion, uid: m.UID,
		created: m.CreationTimestamp, labels: m.Labels, annotations: m.Annotations,
		data: cr.Data.Raw, revision: cr.Revision,
	}
	if v := m.Annotations[instancetype.SupersedesAnnotation]; v != "" {
		s.supersedes, s.annotations = v, nil
		if len(m.Annotations) > 1 {
			s.annotations = maps.Clone(m.Annotations)
			delete(s.annotations, instancetype.SupersedesAnnotation)
		}
	}
	s.annotations = internMap(s.annotations)
	if len(m.OwnerReferences) == 1 {
		o := &m.OwnerReferences[0]
		s.owner = storedOwner{apiVersion: o.APIVersion, kind: o.Kind, name: o.Name, uid: o.UID,
			controller: optional(o.Controller), blockDeletion: optional(o.BlockOwnerDeletion)}
	}
	return s
}

// object is the revision as it was stored.
func (s *storedRevision) object() *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{ObjectMeta: s.meta(), Data: runtime.RawExtension{Raw: s.data}, Revision: s.revision}
}

// meta is the revision's metadata as it was stored.
func (s *storedRevision) meta() metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: s.name, Namespace: s.namespace, ResourceVersion: s.resourceVersion, UID: s.uid,
		CreationTimestamp: s.created, Labels: s.labels, Annotations: s.annotations,
	}
	if s.supersedes != "" {
		m.Annotations = maps.Clone(s.annotations)
		if m.Annotations == nil {
			m.Annotations = make(map[string]string, 1)
		}
		m.Annotations[instancetype.SupersedesAnnotation] = s.supersedes
	}
	if o := s.owner; o.kind != "" {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: o.apiVersion, Kind: o.kind, Name: o.name, UID: o.uid,
			Controller: o.controller.pointer(), BlockOwnerDeletion: o.blockDeletion.pointer()}}
	}
	return m
}

// GetObjectMeta makes a storedRevision an object to client-go's key
// functions.
func (s *storedRevision) GetObjectMeta() metav1.Object {
	m := s.meta()
	return &m
}

// controllerUID is the UID of the revision's controller, or "".
func (s *storedRevision) controllerUID() types.UID {
	if s.owner.controller == isTrue {
		return s.owner.uid
	}
	return ""
}

// RevisionOf is the ControllerRevision an informer of the cache holds as
// obj (stored or typed; what its event handlers get), or nil for anything
// else.
func RevisionOf(obj any) *appsv1.ControllerRevision {
	switch o := obj.(type) {
	case *storedRevision:
		return o.object()
	case *appsv1.ControllerRevision:
		return o
	}
	return nil
}
