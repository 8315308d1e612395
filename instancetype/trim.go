package instancetype

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	virtv1 "kubevirt.io/api/core/v1"
)

// TrimVM cuts a VM down, in place, to what kvlive reads: everything but
// its data volume templates, its volume and memory-dump status, and the
// inline cloud-init data of its template's volumes, which become a digest
// of themselves (TrimTemplate). kvlive's caches hold VMs trimmed
// (kube.TrimUnread); Decide plans a trimmed VM as it plans the whole one.
func TrimVM(vm *virtv1.VirtualMachine) {
	vm.Spec.DataVolumeTemplates = nil
	vm.Status.VolumeSnapshotStatuses, vm.Status.VolumeRequests, vm.Status.VolumeUpdateState, vm.Status.MemoryDumpRequest = nil, nil, nil, nil
	TrimTemplate(vm.Spec.Template)
}

// TrimVMI returns what kvlive reads of a VMI: its metadata (annotations
// aside), architecture, CPU and memory, and of its status the phase,
// conditions, memory, CPU topology, migration state and start revision.
// The rest (devices, volumes, networks, interfaces, guest OS, pods) is
// left behind.
func TrimVMI(in *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
	out := &virtv1.VirtualMachineInstance{TypeMeta: in.TypeMeta, ObjectMeta: in.ObjectMeta}
	out.Annotations = nil
	out.Spec.Architecture = in.Spec.Architecture
	out.Spec.Domain.CPU, out.Spec.Domain.Memory = in.Spec.Domain.CPU, in.Spec.Domain.Memory
	s := &in.Status
	out.Status = virtv1.VirtualMachineInstanceStatus{
		Phase: s.Phase, Conditions: s.Conditions, Memory: s.Memory, CurrentCPUTopology: s.CurrentCPUTopology,
		MigrationState: s.MigrationState, VirtualMachineRevisionName: s.VirtualMachineRevisionName,
	}
	return out
}

// TrimTemplate replaces, in place, the inline cloud-init user and network
// data of a VM template's volumes (often kilobytes a VM) with a digest of
// each: two trimmed templates compare equal exactly when their data does.
// A template a VMI started from is trimmed too before it is compared.
func TrimTemplate(t *virtv1.VirtualMachineInstanceTemplateSpec) {
	if t == nil {
		return
	}
	for i := range t.Spec.Volumes {
		v := &t.Spec.Volumes[i].VolumeSource
		if c := v.CloudInitNoCloud; c != nil {
			digests(&c.UserData, &c.UserDataBase64, &c.NetworkData, &c.NetworkDataBase64)
		}
		if c := v.CloudInitConfigDrive; c != nil {
			digests(&c.UserData, &c.UserDataBase64, &c.NetworkData, &c.NetworkDataBase64)
		}
	}
}

// digestPrefix marks data TrimTemplate replaced.
const digestPrefix = "kvlive-sha256:"

func digests(fields ...*string) {
	for _, f := range fields {
		if *f != "" && !strings.HasPrefix(*f, digestPrefix) {
			sum := sha256.Sum256([]byte(*f))
			*f = digestPrefix + hex.EncodeToString(sum[:])
		}
	}
}
