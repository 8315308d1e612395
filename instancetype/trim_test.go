package instancetype

import (
	"reflect"
	"testing"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// whole gives a row's objects what a real VM and VMI carry and kvlive
// never reads: disks and their volumes with inline cloud-init data, data
// volume templates, volume status; a VMI's annotations, devices,
// interfaces, guest OS and pods.
func whole(in Input, userData string) Input {
	in.VM = in.VM.DeepCopy()
	in.VM.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "root"}}}
	in.VM.Status.VolumeSnapshotStatuses = []virtv1.VolumeSnapshotStatus{{Name: "root", Enabled: true}}
	in.VM.Status.VolumeRequests = []virtv1.VirtualMachineVolumeRequest{{RemoveVolumeOptions: &virtv1.RemoveVolumeOptions{Name: "old"}}}
	volumes(in.VM.Spec.Template, userData)
	if in.Started != nil {
		started := *in.Started
		started.Template = started.Template.DeepCopy()
		volumes(started.Template, userData)
		in.Started = &started
	}
	if in.VMI != nil {
		in.VMI = in.VMI.DeepCopy()
		in.VMI.Annotations = map[string]string{"kubevirt.io/latest-observed-api-version": "v1"}
		in.VMI.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "root"}, {Name: "cloudinit"}}
		in.VMI.Spec.Domain.Resources.Requests = k8scorev1.ResourceList{k8scorev1.ResourceMemory: resource.MustParse("4Gi")}
		in.VMI.Spec.Volumes = []virtv1.Volume{{Name: "cloudinit", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserData: userData}}}}
		in.VMI.Status.NodeName = "node-1"
		in.VMI.Status.Interfaces = []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.7"}}
		in.VMI.Status.GuestOSInfo = virtv1.VirtualMachineInstanceGuestOSInfo{Name: "Fedora Linux", KernelRelease: "6.11"}
		in.VMI.Status.ActivePods = map[types.UID]string{"pod-uid": "node-1"}
	}
	return in
}

func volumes(t *virtv1.VirtualMachineInstanceTemplateSpec, userData string) {
	if t == nil {
		return
	}
	t.Spec.Volumes = append(t.Spec.Volumes,
		virtv1.Volume{Name: "root", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "root"}}},
		virtv1.Volume{Name: "cloudinit", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserData: userData, NetworkData: "version: 2"}}})
}

// trimmed is in as kvlive's cache holds it: the VM and VMI trimmed, and
// the template the VMI started from trimmed as the cache trims it when it
// reads it.
func trimmed(in Input) Input {
	in.VM = in.VM.DeepCopy()
	TrimVM(in.VM)
	if in.VMI != nil {
		in.VMI = TrimVMI(in.VMI.DeepCopy())
	}
	if in.Started != nil {
		started := *in.Started
		started.Template = started.Template.DeepCopy()
		TrimTemplate(started.Template)
		in.Started = &started
	}
	return in
}

// TestDecideSameOnTrimmedObjects plans every row of TestDecide from whole
// objects and from the same objects trimmed as kvlive's cache keeps them
// (kube.TrimUnread), and requires the same decision, reason and changes.
// A VM whose template's cloud-init data changed since its VMI started
// differs from its start in both.
func TestDecideSameOnTrimmedObjects(t *testing.T) {
	const userData = "#cloud-config\npassword: fedora\nchpasswd: { expire: False }\nruncmd:\n  - systemctl enable --now qemu-guest-agent\n"
	for _, tt := range decideCases() {
		t.Run(tt.name, func(t *testing.T) {
			full := whole(tt.in, userData)
			want, got := Decide(full), Decide(trimmed(full))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("trimmed objects planned\n%+v\nwhole ones\n%+v", got, want)
			}
		})
	}
	t.Run("cloud-init data changed since the VMI started", func(t *testing.T) {
		in := whole(Input{VM: vm(withRestartRequired), VMI: vmi(2, "4Gi"), Pinned: gen(it(2, "4Gi"), nil), Target: gen(it(3, "4Gi"), nil), Cluster: defaults,
			Started: &Started{Template: vm().Spec.Template, Generation: gen(it(2, "4Gi"), nil)}}, userData)
		in.VM.Spec.Template.Spec.Volumes[1].CloudInitNoCloud.UserData = userData + "  - reboot\n"
		want, got := Decide(in), Decide(trimmed(in))
		if want.Action != events.ResultRestart || !reflect.DeepEqual(got, want) {
			t.Fatalf("trimmed objects planned\n%+v\nwhole ones\n%+v", got, want)
		}
	})
}
