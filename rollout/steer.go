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

// Steered is what a steering did: the event it steered (the id in full),
// the event's control record, and whether that changed.
type Steered struct {
	EventID string
	Control events.Control
	Changed bool
}

// Steer applies s to its rollout's control record. s.EventID may be a
// unique prefix of a recorded event id (ResolveEventID), except ahead of
// an event, which has no record to expand against yet. It refuses an event
// kvlive has no rollout of (neither planned nor steered before) unless
// s.Ahead, with an id an event can have, and refuses to pause or abort a
// rollout that has finished unless s.Force: nothing would change, and the
// record would claim otherwise.
func Steer(ctx context.Context, js jetstream.JetStream, s Steering, now time.Time) (Steered, error) {
	if !s.Ahead {
		id, err := ResolveEventID(ctx, js, s.EventID)
		if err != nil {
			return Steered{EventID: s.EventID}, err
		}
		s.EventID = id
	}
	done := Steered{EventID: s.EventID}
	store, err := Open(ctx, js)
	if err != nil {
		return done, err
	}
	if err := checkSteerable(ctx, js, store, s); err != nil {
		return done, err
	}
	done.Control, done.Changed, err = store.Apply(ctx, s.EventID, s.Action, s.Reason, s.By, now, s.Force)
	if err != nil {
		done.Changed = false
		return done, fmt.Errorf("%s %s: %w", s.Action, s.EventID, err)
	}
	return done, nil
}

// checkSteerable says why s may not be applied, or nil.
func checkSteerable(ctx context.Context, js jetstream.JetStream, store *Store, s Steering) error {
	if s.Ahead {
		if err := events.CheckAheadID(s.EventID); err != nil {
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

// Promoted is the batch a promote released.
type Promoted struct {
	// EventID is the rollout's event, its id in full.
	EventID string
	// Batch is the batch released, counted from 0, of Batches (the
	// rollout's batch sizes).
	Batch   int
	Batches []int
}

// PromoteNext releases a batch of eventID's batched rollout now
// (Store.Promote: a compare-and-set on the batch before it), by by:
// batch, counted from 1, or, when zero, the one after the last released,
// unless a promote released that one and it has not passed its gate.
// eventID may be a unique prefix of a recorded event id.
func PromoteNext(ctx context.Context, js jetstream.JetStream, eventID string, batch int, by string, now time.Time) (Promoted, error) {
	eventID, err := ResolveEventID(ctx, js, eventID)
	if err != nil {
		return Promoted{EventID: eventID}, err
	}
	p := Promoted{EventID: eventID}
	rec, ok, err := Record(ctx, js, eventID)
	switch {
	case err != nil:
		return p, err
	case !ok:
		return p, noRollout(eventID)
	case len(rec.Batches) < 2:
		return p, fmt.Errorf("%s is not a batched rollout: nothing to promote", eventID)
	case batch == 1 || batch < 0 || batch > len(rec.Batches):
		return p, fmt.Errorf("%s has batches 2 to %d to promote (batch 1 goes first by itself), not %d", eventID, len(rec.Batches), batch)
	}
	p.Batches = rec.Batches
	s, err := Open(ctx, js)
	if err != nil {
		return p, err
	}
	seen := batch - 2
	if batch == 0 {
		c, _, err := s.Get(ctx, eventID)
		if err != nil {
			return p, fmt.Errorf("promote %s: %w", eventID, err)
		}
		seen = c.Batch
	}
	if p.Batch, err = s.Promote(ctx, eventID, seen, len(rec.Batches)-1, batch > 0, by, now); err != nil {
		return p, fmt.Errorf("promote %s: %w", eventID, err)
	}
	return p, nil
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
