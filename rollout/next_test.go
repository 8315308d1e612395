package rollout

import (
	"errors"
	"strings"
	"testing"

	"kvlive/events"
)

func TestControlNext(t *testing.T) {
	tests := []struct {
		from    events.RolloutState
		action  events.ControlAction
		want    events.RolloutState
		changed bool
		err     string
	}{
		{"", events.ActionPause, events.StatePaused, true, ""},
		{"", events.ActionResume, events.StateRunning, false, ""},
		{"", events.ActionAbort, events.StateAborted, true, ""},
		{events.StateRunning, events.ActionPause, events.StatePaused, true, ""},
		{events.StatePaused, events.ActionPause, events.StatePaused, false, ""},
		{events.StatePaused, events.ActionResume, events.StateRunning, true, ""},
		{events.StatePaused, events.ActionAbort, events.StateAborted, true, ""},
		{events.StateAborted, events.ActionAbort, events.StateAborted, false, ""},
		{events.StateAborted, events.ActionResume, events.StateAborted, false, "cannot resume"},
		{events.StateAborted, events.ActionPause, events.StateAborted, false, "cannot pause"},
		{events.StateRunning, "stop", events.StateRunning, false, "unknown rollout action"},
	}
	for _, tt := range tests {
		got, changed, err := Next(events.Control{State: tt.from}, tt.action)
		if got != tt.want || changed != tt.changed || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%q %s: got %s changed=%v err=%v, want %s changed=%v err~%q", tt.from, tt.action, got, changed, err, tt.want, tt.changed, tt.err)
		}
	}
}

// TestAbortedIsFinalAndSaysSo: every action on an aborted rollout is an
// error callers can tell apart (errors.Is ErrAborted), not by its words.
func TestAbortedIsFinalAndSaysSo(t *testing.T) {
	for _, a := range []events.ControlAction{events.ActionPause, events.ActionResume} {
		if _, _, err := Next(events.Control{State: events.StateAborted}, a); !errors.Is(err, ErrAborted) {
			t.Errorf("%s of an aborted rollout: %v, want ErrAborted", a, err)
		}
	}
}
