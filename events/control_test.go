package events

import (
	"errors"
	"strings"
	"testing"
)

func TestControlNext(t *testing.T) {
	tests := []struct {
		from    RolloutState
		action  ControlAction
		want    RolloutState
		changed bool
		err     string
	}{
		{"", ActionPause, StatePaused, true, ""},
		{"", ActionResume, StateRunning, false, ""},
		{"", ActionAbort, StateAborted, true, ""},
		{StateRunning, ActionPause, StatePaused, true, ""},
		{StatePaused, ActionPause, StatePaused, false, ""},
		{StatePaused, ActionResume, StateRunning, true, ""},
		{StatePaused, ActionAbort, StateAborted, true, ""},
		{StateAborted, ActionAbort, StateAborted, false, ""},
		{StateAborted, ActionResume, StateAborted, false, "cannot resume"},
		{StateAborted, ActionPause, StateAborted, false, "cannot pause"},
		{StateRunning, "stop", StateRunning, false, "unknown rollout action"},
	}
	for _, tt := range tests {
		got, changed, err := Control{State: tt.from}.Next(tt.action)
		if got != tt.want || changed != tt.changed || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%q %s: got %s changed=%v err=%v, want %s changed=%v err~%q", tt.from, tt.action, got, changed, err, tt.want, tt.changed, tt.err)
		}
	}
}

func TestUnmarshalControlRejectsUnknownStates(t *testing.T) {
	if _, err := UnmarshalControl([]byte(`{"state":"frozen"}`)); err == nil {
		t.Error("accepted state frozen")
	}
	c, err := UnmarshalControl([]byte(`{"state":"paused","by":"ops@host","reason":"why"}`))
	if err != nil || c.State != StatePaused || c.Describe() != "by ops@host: why" {
		t.Errorf("got %+v, %v", c, err)
	}
}

// TestAbortedIsFinalAndSaysSo: every action on an aborted rollout is an
// error callers can tell apart (errors.Is ErrAborted), not by its words.
func TestAbortedIsFinalAndSaysSo(t *testing.T) {
	for _, a := range []ControlAction{ActionPause, ActionResume} {
		if _, _, err := (Control{State: StateAborted}).Next(a); !errors.Is(err, ErrAborted) {
			t.Errorf("%s of an aborted rollout: %v, want ErrAborted", a, err)
		}
	}
	if id := EventID(KindClusterInstancetype, "u", 12); !strings.HasPrefix(id, EventIDPrefix(KindClusterInstancetype, "u")) || id != "VirtualMachineClusterInstancetype/u/12" {
		t.Errorf("EventID %q and its prefix disagree", id)
	}
}
