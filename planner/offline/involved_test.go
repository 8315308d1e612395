package offline_test

import (
	"slices"
	"testing"

	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/planner/offline"
)

// TestInvolvedNamesTheSourceAndWhatItsVMsReference: a switch from
// u1.small reads the revisions of u1.small and of the preferences its VMs
// reference, not those of VMs elsewhere or of the switch's target.
func TestInvolvedNamesTheSourceAndWhatItsVMsReference(t *testing.T) {
	a, b, elsewhere := testenv.VM("ns", "a", "u1.small"), testenv.VM("ns", "b", "u1.small"), testenv.VM("ns", "c", "u1.large")
	a.Spec.Preference = &virtv1.PreferenceMatcher{Name: "windows"}
	elsewhere.Spec.Preference = &virtv1.PreferenceMatcher{Name: "linux"}
	c, err := kube.CacheOf(a, b, elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	from := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"}
	got := offline.Involved(c, offline.Request{From: &from, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.xlarge"}})
	if want := []string{"u1.small", "windows"}; !slices.Equal(got, want) {
		t.Errorf("Involved = %v, want %v", got, want)
	}
}
