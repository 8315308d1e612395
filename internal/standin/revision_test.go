package standin

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/instancetype"
	"kvlive/internal/testenv"
)

// TestRevisionAgreesWithKvlive checks the stand-in's own revision code
// against kvlive's instancetype.NewRevision, which the applier writes with:
// the two are written apart, so they check each other.
func TestRevisionAgreesWithKvlive(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.large", 4, "8Gi")
	it.Generation, it.Labels, it.Annotations = 7, map[string]string{"team": "a"}, map[string]string{"note": "x"}
	it.Finalizers, it.ResourceVersion = []string{"keep"}, "42"
	nsIT := testenv.Instancetype("shop", "std", 2, "4Gi")
	pref := testenv.ClusterPreference("fedora", v1beta1.Cores)
	vm := testenv.VM("shop", "web-1", "u1.large")
	for _, obj := range []runtime.Object{it, nsIT, pref} {
		mine, err := newRevision(vm, obj)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := instancetype.NewRevision(vm, obj)
		if err != nil {
			t.Fatal(err)
		}
		if mine.Name != theirs.Name || mine.Namespace != theirs.Namespace ||
			!reflect.DeepEqual(mine.Labels, theirs.Labels) || !reflect.DeepEqual(mine.OwnerReferences, theirs.OwnerReferences) {
			t.Errorf("%T: stand-in %s %v %v, kvlive %s %v %v", obj, mine.Name, mine.Labels, mine.OwnerReferences,
				theirs.Name, theirs.Labels, theirs.OwnerReferences)
		}
		var a, b any
		if json.Unmarshal(mine.Data.Raw, &a) != nil || json.Unmarshal(theirs.Data.Raw, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("%T data: stand-in %s, kvlive %s", obj, mine.Data.Raw, theirs.Data.Raw)
		}
	}
}
