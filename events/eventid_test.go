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

func TestShortEventID(t *testing.T) {
	change := EventID(KindClusterInstancetype, "2f6c1a3b-0d5e-4c1f-9a7b-1234567890ab", 5)
	sw := SwitchEventID("0b5c9e1d-aaaa-4bbb-8ccc-dddddddddddd")
	for id, want := range map[string]string{change: "vmcf/2f6c1a3b/5", sw: "switch/0b5c9e1d", EventID(KindPreference, "uid-1", 2): "vmp/uid-1/2"} {
		short := ShortEventID(id)
		if short != want {
			t.Errorf("ShortEventID(%s) = %s, want %s", id, short, want)
		}
		if !MatchesShort(id, short) {
			t.Errorf("%s does not match its short form %s", id, short)
		}
	}
	for _, tt := range []struct {
		short string
		match bool
	}{
		{"vmcf/2f6c/5", true}, {"vmcf/2f6/5", false}, {"vmcf/2f6c1a3b/6", false}, {"vmf/2f6c1a3b/5", false},
		{"VirtualMachineClusterInstancetype/2f6c1a3b/5", true}, {"vmcf/2f6c1a3b", false},
	} {
		if got := MatchesShort(change, tt.short); got != tt.match {
			t.Errorf("MatchesShort(%s, %s) = %v, want %v", change, tt.short, got, tt.match)
		}
	}
}
