package instancetype_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	. "kvlive/instancetype"
)

// lookup is a Lookup over plain maps keyed by namespace/name.
type lookup struct {
	revisions map[string]*appsv1.ControllerRevision
	vmis      map[string]*virtv1.VirtualMachineInstance
}

func newLookup(revs ...*appsv1.ControllerRevision) lookup {
	l := lookup{revisions: map[string]*appsv1.ControllerRevision{}, vmis: map[string]*virtv1.VirtualMachineInstance{}}
	for _, r := range revs {
		l.revisions[r.Namespace+"/"+r.Name] = r
	}
	return l
}

func (l lookup) Revision(namespace, name string) (*appsv1.ControllerRevision, bool) {
	r, ok := l.revisions[namespace+"/"+name]
	return r, ok
}

func (l lookup) VMI(namespace, name string) *virtv1.VirtualMachineInstance {
	return l.vmis[namespace+"/"+name]
}

func TestPlanVM(t *testing.T) {
	u1 := &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "u1", UID: "uid-u1", Generation: 1},
		Spec:       v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 2}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("4Gi")}},
	}
	newVM := func(name, ns string, it *virtv1.InstancetypeMatcher) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name + "-" + ns)},
			Spec: virtv1.VirtualMachineSpec{Instancetype: it}}
	}
	pinned := newVM("pinned", "ns", &virtv1.InstancetypeMatcher{Name: "u1"})
	gen1, _ := NewRevision(pinned, u1)
	pinned.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: "u1", ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: gen1.Name}}
	unpinned := newVM("unpinned", "ns", &virtv1.InstancetypeMatcher{Name: "u1"})
	dangling := newVM("dangling", "ns", &virtv1.InstancetypeMatcher{Name: "u1"})
	dangling.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: "u1", ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: "gone"}}
	other := newVM("other", "ns", &virtv1.InstancetypeMatcher{Name: "u9"})
	legacy := newVM("legacy", "ns", &virtv1.InstancetypeMatcher{Name: "u1"})
	legacyRev, _ := NewRevision(legacy, u1)
	legacy.Spec.Instancetype.RevisionName = legacyRev.Name

	f := newLookup(gen1, legacyRev)
	spec2 := u1.Spec.DeepCopy()
	spec2.CPU.Guest = 3
	u1Ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}
	repin := func(gen int64) Target {
		return Target{Target: events.Target{Move: events.MoveRepin, Object: u1Ref, UID: "uid-u1", Generation: gen}, Spec: spec2}
	}
	nsIT := events.Ref{Kind: events.KindInstancetype, Namespace: "elsewhere", Name: "std"}
	tests := []struct {
		name   string
		t      Target
		vm     *virtv1.VirtualMachine
		want   events.Result
		reason string
	}{
		{"stopped VM on an older generation", repin(2), pinned, events.ResultNextBoot, "next start"},
		{"already at the generation", repin(1), pinned, events.ResultNone, "already pinned to generation 1"},
		{"not pinned yet", repin(2), unpinned, events.ResultSkip, "not pinned"},
		{"pinned revision missing", repin(2), dangling, events.ResultSkip, "not found"},
		{"references something else", repin(2), other, events.ResultSkip, "no longer references clusterinstancetype/u1"},
		{"event-level skip", Target{Target: repin(2).Target, Skip: "u1 was deleted"}, pinned, events.ResultSkip, "u1 was deleted"},
		{"switch to what the VM already uses", Target{Target: events.Target{Move: events.MoveSwitch, Object: u1Ref, From: &nsIT}}, pinned, events.ResultNone, "already references"},
		{"switch across namespaces", Target{Target: events.Target{Move: events.MoveSwitch, Object: nsIT, From: &u1Ref}}, pinned, events.ResultSkip, "another namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanVM(f, "ev", tt.t, tt.vm)
			if p.Action != tt.want || !strings.Contains(p.Reason, tt.reason) {
				t.Errorf("plan = %s %q, want %s containing %q", p.Action, p.Reason, tt.want, tt.reason)
			}
			if p.VM.UID != string(tt.vm.UID) || p.EventID != "ev" {
				t.Errorf("plan identity = %+v", p)
			}
		})
	}
	if p := PlanVM(f, "ev", repin(2), pinned); p.Target.FromRevision != gen1.Name || p.Target.Pin != events.PinStatus {
		t.Errorf("target = %+v, want the status pin %s to test against", p.Target, gen1.Name)
	}
	// A VM created before KubeVirt v1.5 is pinned by spec.instancetype.revisionName.
	if p := PlanVM(f, "ev", repin(2), legacy); p.Action != events.ResultNextBoot || p.Target.FromRevision != legacyRev.Name || p.Target.Pin != events.PinSpecRevisionName {
		t.Errorf("legacy plan = %s, target %+v", p.Action, p.Target)
	}
}
