package drift_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/drift"
	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// fleet is one cluster instance type at generation 3 and VMs pinned every
// way a VM can stand against it, plus a preference that no longer exists.
func fleet(t *testing.T) []runtime.Object {
	t.Helper()
	it := testenv.ClusterInstancetype("u1.medium", 2, "4Gi")
	objs := []runtime.Object{}
	pinned := func(vm *virtv1.VirtualMachine, generation int64, uid types.UID) *virtv1.VirtualMachine {
		at := it.DeepCopy()
		at.Generation = generation
		if uid != "" {
			at.UID = uid
		}
		objs = append(objs, testenv.Pin(t, vm, at))
		return vm
	}
	running := func(vm *virtv1.VirtualMachine) *virtv1.VirtualMachine {
		objs = append(objs, testenv.RunningVMI(vm.Namespace, vm.Name))
		return vm
	}
	// migrating runs the VM with a CPU hot-plug on its VMI that waits for
	// the live migration bringing it to the guest.
	migrating := func(vm *virtv1.VirtualMachine) *virtv1.VirtualMachine {
		vmi := testenv.RunningVMI(vm.Namespace, vm.Name)
		vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
		objs = append(objs, vmi)
		return vm
	}
	restartRequired := func(vm *virtv1.VirtualMachine) *virtv1.VirtualMachine {
		vm.Status.Conditions = append(vm.Status.Conditions, virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue})
		return vm
	}
	gone := testenv.VM("team-b", "gone-rev", "u1.medium")
	gone.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: "u1.medium", ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: "deleted-revision"}}
	withPref := running(pinned(testenv.VM("team-a", "with-pref", "u1.medium"), 3, ""))
	withPref.Spec.Preference = &virtv1.PreferenceMatcher{Name: "deleted-pref"}
	objs = append(objs, testenv.Pin(t, withPref, testenv.ClusterPreference("deleted-pref", v1beta1.Sockets)))
	it.Generation = 3
	objs = append(objs, it,
		migrating(pinned(testenv.VM("team-a", "latest", "u1.medium"), 3, "")),
		restartRequired(running(pinned(testenv.VM("team-a", "restart", "u1.medium"), 2, ""))),
		pinned(testenv.VM("team-a", "stopped-behind", "u1.medium"), 1, ""),
		testenv.VM("team-b", "unpinned", "u1.medium"),
		gone,
		running(pinned(testenv.VM("team-b", "recreated", "u1.medium"), 3, "uid-old")),
		withPref,
		testenv.VM("team-b", "no-reference", ""),
	)
	return objs
}

func TestMeasureCountsEveryVMWhereItsPinStands(t *testing.T) {
	c, err := kube.CacheOf(fleet(t)...)
	if err != nil {
		t.Fatal(err)
	}
	got := drift.Measure(c, drift.Filter{})
	it := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}
	pref := events.Ref{Kind: events.KindClusterPreference, Name: "deleted-pref"}
	want := []drift.Row{{
		Object: it, Generation: 3, Total: 7, Latest: 2, Behind: 2, Unpinned: 1, Unknown: 2, MaxLag: 2, Lags: map[int64]int{1: 1, 2: 1},
		RestartRequired: 1, HotplugPending: 1, Stopped: 3,
		Members: []drift.VM{
			{Namespace: "team-a", Name: "latest", State: drift.StateLatest, Revision: "latest-u1.medium-v1beta1-uid-u1.medium-3", Generation: 3, HotplugPending: true},
			{Namespace: "team-a", Name: "restart", State: drift.StateBehind, Revision: "restart-u1.medium-v1beta1-uid-u1.medium-2", Generation: 2, Lag: 1, RestartRequired: true},
			{Namespace: "team-a", Name: "stopped-behind", State: drift.StateBehind, Revision: "stopped-behind-u1.medium-v1beta1-uid-u1.medium-1", Generation: 1, Lag: 2, Stopped: true},
			{Namespace: "team-a", Name: "with-pref", State: drift.StateLatest, Revision: "with-pref-u1.medium-v1beta1-uid-u1.medium-3", Generation: 3},
			{Namespace: "team-b", Name: "gone-rev", State: drift.StateUnknown, Revision: "deleted-revision", Stopped: true,
				Reason: "pinned ControllerRevision team-b/deleted-revision not found"},
			{Namespace: "team-b", Name: "recreated", State: drift.StateUnknown, Revision: "recreated-u1.medium-v1beta1-uid-old-3", Generation: 3,
				Reason: "pinned to a deleted clusterinstancetype/u1.medium of the same name (uid uid-old)"},
			{Namespace: "team-b", Name: "unpinned", State: drift.StateUnpinned, Stopped: true, Reason: "VM has no pinned revision yet"},
		},
	}, {
		Object: pref, Missing: true, Total: 1, Unknown: 1,
		Members: []drift.VM{{Namespace: "team-a", Name: "with-pref", State: drift.StateUnknown, Revision: "with-pref-deleted-pref-v1beta1-uid-deleted-pref-1",
			Reason: "clusterpreference/deleted-pref does not exist"}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Measure (-want +got):\n%s", diff)
	}
	if n := got[0].NotLatest(); n != 4 {
		t.Errorf("NotLatest = %d, want the 2 behind and the 2 unknown", n)
	}
}

func TestMeasureFilters(t *testing.T) {
	c, err := kube.CacheOf(fleet(t)...)
	if err != nil {
		t.Fatal(err)
	}
	it := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}
	rows := drift.Measure(c, drift.Filter{Object: &it, Namespace: "team-a"})
	if len(rows) != 1 || rows[0].Object != it || rows[0].Total != 4 {
		t.Fatalf("Measure of %s in team-a = %+v, want one row of its 4 VMs there", it, rows)
	}
	counts := drift.Measure(c, drift.Filter{CountsOnly: true})
	if len(counts) != 2 || counts[0].Total != 7 || counts[0].NotLatest() != 4 || counts[0].Members != nil {
		t.Errorf("Measure, counts only: %+v; want the same counts and no VMs", counts)
	}
	none := drift.Measure(c, drift.Filter{Selector: labels.SelectorFromSet(labels.Set{"tier": "web"})})
	if len(none) != 0 {
		t.Errorf("Measure of tier=web = %+v, want no rows: no VM has the label", none)
	}
}

var _ drift.Source = (*kube.Cache)(nil)

// TestAFinishedVMIIsStopped: a VM whose VMI has finished (Succeeded,
// Failed) is stopped, as KubeVirt's IsFinal says, and a hot-plug
// condition left on that VMI waits for no migration.
func TestAFinishedVMIIsStopped(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.medium", 2, "4Gi")
	objs := []runtime.Object{it}
	for _, phase := range []virtv1.VirtualMachineInstancePhase{virtv1.Succeeded, virtv1.Failed} {
		vm := testenv.VM("team-a", string(phase), it.Name)
		vmi := testenv.RunningVMI(vm.Namespace, vm.Name)
		vmi.Status.Phase = phase
		vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
		objs = append(objs, testenv.Pin(t, vm, it), vm, vmi)
	}
	c, err := kube.CacheOf(objs...)
	if err != nil {
		t.Fatal(err)
	}
	rows := drift.Measure(c, drift.Filter{CountsOnly: true})
	if len(rows) != 1 || rows[0].Total != 2 || rows[0].Stopped != 2 || rows[0].HotplugPending != 0 {
		t.Errorf("rows = %+v; want 2 VMs, both stopped, none waiting for a migration", rows)
	}
}
