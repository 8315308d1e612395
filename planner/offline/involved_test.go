package offline_test

import (
	"encoding/json"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/planner/offline"
)

// TestInvolvedNamesTheSourceAndWhatItsVMsReference: a switch from
// u1.small reads the revisions of u1.small, of the preferences its VMs
// reference, of the instance type a VM switched to it is still pinned to
// and, for a VM waiting for a restart, of the instance type its VMI
// started from; not those of VMs elsewhere or of the switch's target. Of
// them it reads only the revisions those pins name.
func TestInvolvedNamesTheSourceAndWhatItsVMsReference(t *testing.T) {
	small, medium, windows := testenv.ClusterInstancetype("u1.small", 1, "2Gi"), testenv.ClusterInstancetype("u1.medium", 2, "4Gi"), testenv.ClusterPreference("windows", "")
	small.Generation = 3
	a, b, elsewhere := testenv.VM("ns", "a", small.Name), testenv.VM("ns", "b", small.Name), testenv.VM("ns", "c", "u1.large")
	a.Spec.Preference = &virtv1.PreferenceMatcher{Name: windows.Name}
	elsewhere.Spec.Preference = &virtv1.PreferenceMatcher{Name: "linux"}
	aPin, aPreference := testenv.Pin(t, a, small), testenv.Pin(t, a, windows)
	// b was switched from u1.medium while nothing synced its status.
	bPin := testenv.Pin(t, b, medium)
	b.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}}
	vmi := testenv.RunningVMI("ns", "b")
	vmi.Status.VirtualMachineRevisionName = "b-start"
	started := b.Spec.DeepCopy()
	started.Instancetype = &virtv1.InstancetypeMatcher{Name: "u1.tiny", RevisionName: "b-u1.tiny-v1beta1-uid-1"}
	raw, err := json.Marshal(map[string]any{"spec": started})
	if err != nil {
		t.Fatal(err)
	}
	start := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b-start"}, Data: runtime.RawExtension{Raw: raw}}
	c, err := kube.CacheOf(a, b, elsewhere, vmi, start)
	if err != nil {
		t.Fatal(err)
	}
	from := events.Ref{Kind: events.KindClusterInstancetype, Name: small.Name}
	got := offline.Involved(c, offline.Request{From: &from, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.xlarge"}})
	if want := []string{"u1.medium", "u1.small", "u1.tiny", "windows"}; !slices.Equal(got.Objects, want) {
		t.Errorf("Involved objects = %v, want %v", got.Objects, want)
	}
	want := []string{"ns/" + aPin.Name, "ns/" + aPreference.Name, "ns/" + bPin.Name, "ns/b-u1.tiny-v1beta1-uid-1"}
	slices.Sort(want)
	if !slices.Equal(got.Pins, want) {
		t.Errorf("Involved pins = %v, want %v", got.Pins, want)
	}
}
