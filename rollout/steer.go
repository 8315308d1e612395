package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// Steering is an operator's pause, resume or abort of one event's rollout.
type Steering struct {
	EventID string
	Action  events.ControlAction
	Reason  string
	By      string
	// Ahead steers an event not planned yet (an id an event can have);
	// Force overwrites an unreadable record, or steers a finished rollout.
	Ahead, Force bool
}

// ErrBadEventID is an id no event of kvlive's can have, given to steer an
// event ahead of it.
var ErrBadEventID = errors.New("not an event id")

// badEventID is an error that is ErrBadEventID without saying so twice.
type badEventID struct{ error }

func (badEventID) Is(target error) bool { return target == ErrBadEventID }

// Steer applies s to its rollout's control record and returns the record
// and whether it changed. It refuses an event kvlive has no rollout of
// (neither planned nor steered before) unless s.Ahead, with an id an event
// can have, and refuses to pause or abort a rollout that has finished
// unless s.Force: nothing would change, and the record would claim
// otherwise.
func Steer(ctx context.Context, js jetstream.JetStream, s Steering, now time.Time) (events.Control, bool, error) {
	store, err := Open(ctx, js)
	if err != nil {
		return events.Control{}, false, err
	}
	if err := checkSteerable(ctx, js, store, s); err != nil {
		return events.Control{}, false, err
	}
	c, changed, err := store.Apply(ctx, s.EventID, s.Action, s.Reason, s.By, now, s.Force)
	if err != nil {
		return c, false, fmt.Errorf("%s %s: %w", s.Action, s.EventID, err)
	}
	return c, changed, nil
}

// checkSteerable says why s may not be applied, or nil.
func checkSteerable(ctx context.Context, js jetstream.JetStream, store *Store, s Steering) error {
	if s.Ahead {
		if err := events.CheckEventID(s.EventID); err != nil {
			return badEventID{fmt.Errorf("%s --ahead: %w", s.Action, err)}
		}
	}
	_, recorded, err := Record(ctx, js, s.EventID)
	switch {
	case err != nil:
		return err
	case recorded && s.Action != events.ActionResume && !s.Force:
		return checkUnfinished(ctx, js, s.EventID, s.Action)
	case recorded || s.Ahead:
		return nil
	}
	if _, rev, _ := store.Get(ctx, s.EventID); rev > 0 {
		return nil
	}
	err = noRollout(s.EventID)
	if s.Action != events.ActionResume {
		err = fmt.Errorf("%w; to %s an event before it is planned, say --ahead", err, s.Action)
	}
	return err
}

// PromoteNext releases the batch after the last one released of eventID's
// batched rollout now (Store.Promote: a compare-and-set on the batch it
// read), by by. It returns the batch released and the rollout's record.
func PromoteNext(ctx context.Context, js jetstream.JetStream, eventID, by string, now time.Time) (int, events.Rollout, error) {
	rec, ok, err := Record(ctx, js, eventID)
	switch {
	case err != nil:
		return 0, rec, err
	case !ok:
		return 0, rec, noRollout(eventID)
	case len(rec.Batches) < 2:
		return 0, rec, fmt.Errorf("%s is not a batched rollout: nothing to promote", eventID)
	}
	s, err := Open(ctx, js)
	if err != nil {
		return 0, rec, err
	}
	seen, _, err := s.Get(ctx, eventID)
	if err != nil {
		return 0, rec, fmt.Errorf("promote %s: %w", eventID, err)
	}
	batch, err := s.Promote(ctx, eventID, seen.Batch, len(rec.Batches)-1, by, now)
	if err != nil {
		return batch, rec, fmt.Errorf("promote %s: %w", eventID, err)
	}
	return batch, rec, nil
}

// Known says whether kvlive knows eventID: planned, or asked to steer
// (ahead of it); otherwise it is ErrNoRollout.
func Known(ctx context.Context, js jetstream.JetStream, eventID string) error {
	_, recorded, err := Record(ctx, js, eventID)
	if err != nil || recorded {
		return err
	}
	if s, err := Open(ctx, js); err == nil {
		if _, rev, _ := s.Get(ctx, eventID); rev > 0 {
			return nil
		}
	}
	return noRollout(eventID)
}

func noRollout(eventID string) error {
	return fmt.Errorf("%w %q: no event with that id was planned (kvlive events lists them)", ErrNoRollout, eventID)
}

// checkUnfinished refuses to pause or abort a rollout with nothing left to
// move: complete, incomplete, or aborted with every plan settled (aborting
// that again is answered "already aborted").
func checkUnfinished(ctx context.Context, js jetstream.JetStream, eventID string, action events.ControlAction) error {
	a, err := AccountOf(ctx, js, eventID)
	if err != nil {
		return err
	}
	if !a.Done() || (a.Phase == PhaseAborted && action == events.ActionAbort) {
		return nil
	}
	return fmt.Errorf("rollout %s is %s: it moves no VM any more, so there is nothing to %s (kvlive rollout status %s)",
		eventID, a.Phase, action, eventID)
}
