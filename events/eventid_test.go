package events

import "testing"

func TestCheckEventID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{EventID(KindClusterInstancetype, "3c3c0f0e-1a2b-4c5d-8e9f-0a1b2c3d4e5f", 5), true},
		{EventID(KindPreference, "uid-1", 1), true},
		{SwitchEventID("0b5c7a4e-9d2f-4e1a-8b3c-5d6e7f8a9b0c"), true},
		{"retry/0b5c7a4e-9d2f-4e1a-8b3c-5d6e7f8a9b0c", true},
		{"replay/0b5c7a4e-9d2f-4e1a-8b3c-5d6e7f8a9b0c", true},
		{"switch/0b5c", false},
		{"VirtualMachineClusterInstancetype/uid/0", false},
		{"VirtualMachineClusterInstancetype/uid/five", false},
		{"VirtualMachineClusterInstancetype//5", false},
		{"VirtualMachine/uid/5", false},
		{"u1.medium", false},
		{"", false},
	} {
		if err := CheckEventID(tc.id); (err == nil) != tc.ok {
			t.Errorf("CheckEventID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}
