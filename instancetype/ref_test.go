package instancetype

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

func TestRefKeys(t *testing.T) {
	vm := func(it *virtv1.InstancetypeMatcher, pref *virtv1.PreferenceMatcher) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "vm"},
			Spec: virtv1.VirtualMachineSpec{Instancetype: it, Preference: pref}}
	}
	tests := []struct {
		name string
		vm   *virtv1.VirtualMachine
		want []string
	}{
		{"empty kind is the cluster kind", vm(&virtv1.InstancetypeMatcher{Name: "u1"}, nil),
			[]string{"VirtualMachineClusterInstancetype/_/u1"}},
		{"namespaced kind files under the VM namespace", vm(&virtv1.InstancetypeMatcher{Kind: "VirtualMachineInstancetype", Name: "std"}, nil),
			[]string{"VirtualMachineInstancetype/team/std"}},
		{"lower-case plural kind", vm(&virtv1.InstancetypeMatcher{Kind: "virtualmachineclusterinstancetypes", Name: "u1"}, nil),
			[]string{"VirtualMachineClusterInstancetype/_/u1"}},
		{"instance type and preference", vm(&virtv1.InstancetypeMatcher{Name: "u1"}, &virtv1.PreferenceMatcher{Name: "fedora"}),
			[]string{"VirtualMachineClusterInstancetype/_/u1", "VirtualMachineClusterPreference/_/fedora"}},
		{"namespaced preference", vm(nil, &virtv1.PreferenceMatcher{Kind: "VirtualMachinePreference", Name: "mine"}),
			[]string{"VirtualMachinePreference/team/mine"}},
		{"inferFromVolume without a name", vm(&virtv1.InstancetypeMatcher{InferFromVolume: "root"}, nil), nil},
		{"unknown kind is not indexed", vm(&virtv1.InstancetypeMatcher{Kind: "Pod", Name: "x"}, nil), nil},
		{"no references", vm(nil, nil), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RefKeys(tt.vm); !slices.Equal(got, tt.want) {
				t.Errorf("RefKeys = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPinOf(t *testing.T) {
	status := &virtv1.InstancetypeStatusRef{Name: "u1", ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: "from-status"}}
	vm := &virtv1.VirtualMachine{Spec: virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: "u1"}}, Status: virtv1.VirtualMachineStatus{InstancetypeRef: status}}
	if p, err := PinOf(vm, false); err != nil || p.Revision != "from-status" || p.Field != "status" {
		t.Errorf("status pin = %+v, %v", p, err)
	}
	vm.Spec.Instancetype.RevisionName = "from-spec"
	if p, err := PinOf(vm, false); err != nil || p.Revision != "from-spec" || p.Field != "spec" {
		t.Errorf("legacy pin = %+v, %v", p, err)
	}
	if _, err := PinOf(vm, true); err != ErrNotPinned {
		t.Errorf("preference pin err = %v, want ErrNotPinned", err)
	}
}
