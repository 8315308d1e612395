package pruner_test

import (
	"encoding/json"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/pruner"
)

// TestFindKeepsWhatTheRunningVMIStartedFrom: over a cache, a running VM's
// superseded revision its VMI started from is kept and the other goes; a
// VM whose running VMI names no start revision is reported and left alone.
func TestFindKeepsWhatTheRunningVMIStartedFrom(t *testing.T) {
	vm, owned := history(t)
	vm.Spec.Preference, vm.Status.PreferenceRef = nil, nil
	started := vm.Spec.DeepCopy()
	started.Instancetype.RevisionName = owned[1].Name // generation 2
	raw, err := json.Marshal(map[string]any{"spec": started})
	if err != nil {
		t.Fatal(err)
	}
	start := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm-start"}, Data: runtime.RawExtension{Raw: raw}}
	find := func(startName string) ([]string, []pruner.Problem) {
		t.Helper()
		vmi := testenv.RunningVMI("ns", "vm")
		vmi.Status.VirtualMachineRevisionName = startName
		objs := []runtime.Object{vm, vmi, start}
		for _, cr := range owned[:5] {
			objs = append(objs, cr)
		}
		c, err := kube.CacheOf(objs...)
		if err != nil {
			t.Fatal(err)
		}
		cands, problems := pruner.Find(c, "", 0)
		var names []string
		for _, c := range cands {
			names = append(names, c.Revision)
		}
		return names, problems
	}
	names, problems := find("vm-start")
	if want := []string{owned[2].Name}; !slices.Equal(names, want) || len(problems) != 0 {
		t.Errorf("candidates %v (problems %v), want only %v: generation 2 is what the VMI started from, 4 is pinned, 5 newer, 1 KubeVirt's", names, problems, want)
	}
	names, problems = find("")
	if len(names) != 0 || len(problems) != 1 || problems[0].VM != "vm" {
		t.Errorf("VMI naming no start revision: candidates %v, problems %v; want none and the VM reported", names, problems)
	}
}
