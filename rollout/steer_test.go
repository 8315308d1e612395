package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// TestSteerRefusesWhatItCannotMeanToChange: steering an event kvlive does
// not know is an error unless ahead of it, with an id an event can have;
// pausing or aborting a finished rollout is refused unless forced; a known
// event is paused.
func TestSteerRefusesWhatItCannotMeanToChange(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	now := time.Now()
	steer := func(s Steering) (events.Control, bool, error) {
		s.By = "alice"
		return Steer(ctx, js, s, now)
	}
	if _, _, err := steer(Steering{EventID: "typo", Action: events.ActionPause}); !errors.Is(err, ErrNoRollout) || !strings.Contains(err.Error(), "say --ahead") {
		t.Errorf("pause of an unknown event: %v", err)
	}
	if _, _, err := steer(Steering{EventID: "typo", Action: events.ActionPause, Ahead: true}); !errors.Is(err, ErrBadEventID) || !strings.HasPrefix(err.Error(), "pause --ahead: ") {
		t.Errorf("pause --ahead of an id no event has: %v", err)
	}
	ahead := events.EventID(events.KindClusterInstancetype, "uid", 9)
	if c, changed, err := steer(Steering{EventID: ahead, Action: events.ActionPause, Ahead: true}); err != nil || !changed || c.State != events.StatePaused {
		t.Errorf("pause --ahead: %+v %v %v", c, changed, err)
	}
	if err := Known(ctx, js, ahead); err != nil {
		t.Errorf("an event paused ahead is known: %v", err)
	}

	recordRollout(t, js, 1) // acctEvent, planned: 1 VM
	publishOutcome(t, js, "a", 1, events.ResultLive)
	if _, _, err := steer(Steering{EventID: acctEvent, Action: events.ActionAbort}); err == nil || !strings.Contains(err.Error(), "is complete: it moves no VM any more") {
		t.Errorf("abort of a complete rollout: %v", err)
	}
	if c, changed, err := steer(Steering{EventID: acctEvent, Action: events.ActionAbort, Force: true}); err != nil || !changed || c.State != events.StateAborted {
		t.Errorf("abort --force of a complete rollout: %+v %v %v", c, changed, err)
	}
}
