package kube

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	virtv1 "kubevirt.io/api/core/v1"
)

// A KubeVirt object decoded into its Go type costs more than its content:
// a VirtualMachine's template is a 1,000-byte struct before any field is
// set, a VirtualMachineInstance 1,528 bytes, most of it for fields kvlive
// never reads. A trimmed cache (NewCache) therefore keeps each VM and VMI
// in a stored form, storedVM and storedVMI, and hands out typed objects
// rebuilt from it on every read (the cache's VM, VMI, VMs and Referencing);
// the informers' handlers get the stored forms, which carry the object's
// metadata for keys (meta.Accessor). docs/performance.md measures it.

// storedVM is a cached VM: the VM without its template, and the template
// as JSON, decoded when the VM is read.
type storedVM struct {
	vm       *virtv1.VirtualMachine
	template []byte
}

// GetObjectMeta makes a storedVM an object to client-go's key functions.
func (s *storedVM) GetObjectMeta() metav1.Object { return &s.vm.ObjectMeta }

// storeVM keeps vm, a trimmed VM the cache now owns, in its stored form.
func storeVM(vm *virtv1.VirtualMachine) (*storedVM, error) {
	s := &storedVM{vm: vm}
	if t := vm.Spec.Template; t != nil {
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, fmt.Errorf("kube: VM %s/%s: template: %w", vm.Namespace, vm.Name, err)
		}
		s.template = raw
		vm.Spec.Template = nil
	}
	return s, nil
}

// object is the VM as it was stored: a copy of the VM with its template
// decoded, sharing everything else with the stored one (callers must not
// mutate it, as with any informer object). A template that does not
// decode, which one json.Marshal wrote cannot be, is reported through
// client-go's error handlers (logged) and left out.
func (s *storedVM) object() *virtv1.VirtualMachine {
	vm := *s.vm
	if s.template != nil {
		t := &virtv1.VirtualMachineInstanceTemplateSpec{}
		if err := json.Unmarshal(s.template, t); err != nil {
			utilruntime.HandleError(fmt.Errorf("kube: VM %s/%s: the cached template does not decode, read without it: %w", vm.Namespace, vm.Name, err))
		} else {
			vm.Spec.Template = t
		}
	}
	return &vm
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
	vmi := &virtv1.VirtualMachineInstance{TypeMeta: s.typ, ObjectMeta: s.meta}
	vmi.Spec.Architecture = s.architecture
	vmi.Spec.Domain.CPU, vmi.Spec.Domain.Memory = s.cpu, s.memory
	vmi.Status = virtv1.VirtualMachineInstanceStatus{
		Phase: s.phase, Conditions: s.conditions, Memory: s.memoryStatus, CurrentCPUTopology: s.topology,
		MigrationState: s.migration, VirtualMachineRevisionName: s.revisionName,
	}
	return vmi
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
