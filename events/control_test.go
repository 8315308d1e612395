package events

import (
	"strings"
	"testing"
)

func TestUnmarshalControlRejectsUnknownStates(t *testing.T) {
	if _, err := UnmarshalControl([]byte(`{"state":"frozen"}`)); err == nil {
		t.Error("accepted state frozen")
	}
	c, err := UnmarshalControl([]byte(`{"state":"paused","by":"ops@host","reason":"why"}`))
	if err != nil || c.State != StatePaused || c.Describe() != "by ops@host: why" {
		t.Errorf("got %+v, %v", c, err)
	}
}

// TestEventIDPrefix: an event id starts with its object's prefix.
func TestEventIDPrefix(t *testing.T) {
	if id := EventID(KindClusterInstancetype, "u", 12); !strings.HasPrefix(id, EventIDPrefix(KindClusterInstancetype, "u")) || id != "VirtualMachineClusterInstancetype/u/12" {
		t.Errorf("EventID %q and its prefix disagree", id)
	}
}
