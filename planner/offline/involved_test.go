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
// reference and, for a VM waiting for a restart, of the instance type its
// VMI started from; not those of VMs elsewhere or of the switch's target.
func TestInvolvedNamesTheSourceAndWhatItsVMsReference(t *testing.T) {
	a, b, elsewhere := testenv.VM("ns", "a", "u1.small"), testenv.VM("ns", "b", "u1.small"), testenv.VM("ns", "c", "u1.large")
	a.Spec.Preference = &virtv1.PreferenceMatcher{Name: "windows"}
	elsewhere.Spec.Preference = &virtv1.PreferenceMatcher{Name: "linux"}
	b.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}}
	vmi := testenv.RunningVMI("ns", "b")
	vmi.Status.VirtualMachineRevisionName = "b-start"
	started := b.Spec.DeepCopy()
	started.Instancetype.Name = "u1.tiny"
	raw, err := json.Marshal(map[string]any{"spec": started})
	if err != nil {
		t.Fatal(err)
	}
	start := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b-start"}, Data: runtime.RawExtension{Raw: raw}}
	c, err := kube.CacheOf(a, b, elsewhere, vmi, start)
	if err != nil {
		t.Fatal(err)
	}
	from := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"}
	got := offline.Involved(c, offline.Request{From: &from, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.xlarge"}})
	if want := []string{"u1.small", "u1.tiny", "windows"}; !slices.Equal(got, want) {
		t.Errorf("Involved = %v, want %v", got, want)
	}
}
