package applier

import (
	"testing"

	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

func TestRepinPatchBytes(t *testing.T) {
	tests := []struct {
		name       string
		field      events.PinField
		preference bool
		want       string
		sub        []string
	}{
		{"status instancetype: name, kind and status ref tested", events.PinStatus, false,
			`[{"op":"test","path":"/spec/instancetype/name","value":"u1"},{"op":"test","path":"/spec/instancetype/kind","value":"VirtualMachineClusterInstancetype"},` +
				`{"op":"test","path":"/status/instancetypeRef/name","value":"u1"},` +
				`{"op":"test","path":"/status/instancetypeRef/controllerRevisionRef/name","value":"vm-a-1"},{"op":"replace","path":"/status/instancetypeRef/controllerRevisionRef/name","value":"vm-a-2"}]`,
			[]string{"status"}},
		{"status preference: no kind, no status name yet", events.PinStatus, true,
			`[{"op":"test","path":"/spec/preference/name","value":"linux"},` +
				`{"op":"test","path":"/status/preferenceRef/controllerRevisionRef/name","value":"vm-a-1"},{"op":"replace","path":"/status/preferenceRef/controllerRevisionRef/name","value":"vm-a-2"}]`,
			[]string{"status"}},
		{"legacy spec revisionName", events.PinSpecRevisionName, false,
			`[{"op":"test","path":"/spec/instancetype/name","value":"u1"},{"op":"test","path":"/spec/instancetype/kind","value":"VirtualMachineClusterInstancetype"},` +
				`{"op":"test","path":"/status/instancetypeRef/name","value":"u1"},` +
				`{"op":"test","path":"/spec/instancetype/revisionName","value":"vm-a-1"},{"op":"replace","path":"/spec/instancetype/revisionName","value":"vm-a-2"}]`,
			nil},
	}
	vm := &virtv1.VirtualMachine{
		Spec: virtv1.VirtualMachineSpec{
			Instancetype: &virtv1.InstancetypeMatcher{Name: "u1", Kind: "VirtualMachineClusterInstancetype"},
			Preference:   &virtv1.PreferenceMatcher{Name: "linux"},
		},
		Status: virtv1.VirtualMachineStatus{
			InstancetypeRef: &virtv1.InstancetypeStatusRef{Name: "u1"},
			PreferenceRef:   &virtv1.InstancetypeStatusRef{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, sub := RepinPatch(vm, tt.field, tt.preference, "vm-a-1", "vm-a-2")
			if string(got) != tt.want {
				t.Errorf("patch:\n got %s\nwant %s", got, tt.want)
			}
			if len(sub) != len(tt.sub) || (len(sub) == 1 && sub[0] != tt.sub[0]) {
				t.Errorf("subresource = %v, want %v", sub, tt.sub)
			}
		})
	}
}

func TestSwitchPatchBytes(t *testing.T) {
	large := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}
	tests := []struct {
		name       string
		current    Matcher
		preference bool
		to         events.Ref
		want       string
	}{
		{"empty kind", Matcher{Name: "u1.small"}, false, large,
			`[{"op":"test","path":"/spec/instancetype/name","value":"u1.small"},{"op":"replace","path":"/spec/instancetype/name","value":"u1.large"},{"op":"add","path":"/spec/instancetype/kind","value":"VirtualMachineClusterInstancetype"}]`},
		{"kind tested", Matcher{Name: "u1.small", Kind: "VirtualMachineClusterInstancetype"}, false, large,
			`[{"op":"test","path":"/spec/instancetype/name","value":"u1.small"},{"op":"test","path":"/spec/instancetype/kind","value":"VirtualMachineClusterInstancetype"},{"op":"replace","path":"/spec/instancetype/name","value":"u1.large"},{"op":"add","path":"/spec/instancetype/kind","value":"VirtualMachineClusterInstancetype"}]`},
		{"legacy revisionName dropped", Matcher{Name: "u1.small", RevisionName: "vm-u1.small-1"}, false, large,
			`[{"op":"test","path":"/spec/instancetype/name","value":"u1.small"},{"op":"replace","path":"/spec/instancetype/name","value":"u1.large"},{"op":"add","path":"/spec/instancetype/kind","value":"VirtualMachineClusterInstancetype"},{"op":"remove","path":"/spec/instancetype/revisionName"}]`},
		{"preference to namespaced", Matcher{Name: "linux"}, true, events.Ref{Kind: events.KindPreference, Namespace: "team", Name: "fedora"},
			`[{"op":"test","path":"/spec/preference/name","value":"linux"},{"op":"replace","path":"/spec/preference/name","value":"fedora"},{"op":"add","path":"/spec/preference/kind","value":"VirtualMachinePreference"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SwitchPatch(tt.current, tt.preference, tt.to); string(got) != tt.want {
				t.Errorf("patch:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}
