package pruner_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/instancetype"
	"kvlive/internal/testenv"
	"kvlive/pruner"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// history is one VM's revisions, one a minute: of u1.medium at generations
// 1 (KubeVirt's first pin, not kvlive's) to 5, pinned to 4 (5 is a move on
// its way); of the preference pref at generations 1 to 3, pinned to 3.
// Revisions are named it-<generation> and pref-<generation>.
func history(t *testing.T) (*virtv1.VirtualMachine, []*appsv1.ControllerRevision) {
	t.Helper()
	vm := testenv.VM("ns", "vm", "u1.medium")
	vm.Spec.Preference = &virtv1.PreferenceMatcher{Name: "pref"}
	var owned []*appsv1.ControllerRevision
	snapshot := func(obj runtime.Object, generation int64, ours bool) *appsv1.ControllerRevision {
		m := obj.(metav1.Object)
		m.SetGeneration(generation)
		cr := testenv.Pin(t, vm, obj)
		cr.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(len(owned)) * time.Minute))
		cr.UID = types.UID(cr.Name)
		if ours {
			cr.Labels[instancetype.CreatedByLabel] = instancetype.CreatedBy
		}
		owned = append(owned, cr)
		return cr
	}
	it := testenv.ClusterInstancetype("u1.medium", 2, "4Gi")
	for g := int64(1); g <= 5; g++ {
		snapshot(it, g, g > 1)
	}
	pref := testenv.ClusterPreference("pref", v1beta1.Sockets)
	for g := int64(1); g <= 3; g++ {
		snapshot(pref, g, true)
	}
	it.Generation = 4
	testenv.Pin(t, vm, it)
	return vm, owned
}

func TestSuperseded(t *testing.T) {
	vm, owned := history(t)
	name := func(obj string, g int) string {
		if obj == "it" {
			return instancetype.RevisionName("vm", &metav1.ObjectMeta{Name: "u1.medium", UID: "uid-u1.medium", Generation: int64(g)})
		}
		return instancetype.RevisionName("vm", &metav1.ObjectMeta{Name: "pref", UID: "uid-pref", Generation: int64(g)})
	}
	for _, tc := range []struct {
		name      string
		retention int
		started   []string
		mutate    func(vm *virtv1.VirtualMachine, owned []*appsv1.ControllerRevision) []*appsv1.ControllerRevision
		want      []string
	}{{
		name: "the previous revision is kept for undo, KubeVirt's own never goes, nor the pin or a newer one", retention: 1,
		want: []string{name("it", 2), name("pref", 1)},
	}, {
		name: "retention 0 keeps only what is pinned or newer", retention: 0,
		want: []string{name("it", 2), name("it", 3), name("pref", 1), name("pref", 2)},
	}, {
		name: "retention 3 keeps every older one", retention: 3,
	}, {
		// gen2 → gen3 (a rollout), undone to gen2, then an edit moved it
		// on to gen4: undo of that edit moves it back to gen2, which
		// gen4 records it left; gen3, the newer, stays too.
		name: "what the pin left last stays for undo, older than the newest superseded", retention: 1,
		mutate: func(_ *virtv1.VirtualMachine, owned []*appsv1.ControllerRevision) []*appsv1.ControllerRevision {
			owned[3] = owned[3].DeepCopy()
			owned[3].Annotations = map[string]string{instancetype.SupersedesAnnotation: owned[1].Name}
			return owned
		},
		want: []string{name("pref", 1)},
	}, {
		name: "what the running VMI started from stays", retention: 0, started: []string{name("it", 2), name("pref", 1)},
		want: []string{name("it", 3), name("pref", 2)},
	}, {
		name: "a revision not named as KubeVirt names it is not judged kvlive's snapshot", retention: 0,
		mutate: func(_ *virtv1.VirtualMachine, owned []*appsv1.ControllerRevision) []*appsv1.ControllerRevision {
			owned[1] = owned[1].DeepCopy()
			owned[1].Name = "renamed"
			return owned
		},
		want: []string{name("it", 3), name("pref", 1), name("pref", 2)},
	}, {
		name: "an unpinned reference prunes nothing of its kind", retention: 0,
		mutate: func(vm *virtv1.VirtualMachine, owned []*appsv1.ControllerRevision) []*appsv1.ControllerRevision {
			vm.Status.InstancetypeRef = nil
			return owned
		},
		want: []string{name("pref", 1), name("pref", 2)},
	}, {
		name: "a pin whose revision is not known prunes nothing of its kind", retention: 0,
		mutate: func(vm *virtv1.VirtualMachine, owned []*appsv1.ControllerRevision) []*appsv1.ControllerRevision {
			return append(owned[:3:3], owned[4:]...)
		},
		want: []string{name("pref", 1), name("pref", 2)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			vm, owned := vm.DeepCopy(), append([]*appsv1.ControllerRevision(nil), owned...)
			if tc.mutate != nil {
				owned = tc.mutate(vm, owned)
			}
			var got []string
			for _, c := range pruner.Superseded(pruner.Input{VM: vm, Owned: owned, Started: tc.started, Retention: tc.retention}) {
				got = append(got, c.Revision)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Superseded (-want +got):\n%s", diff)
			}
		})
	}
}
