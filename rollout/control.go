package rollout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// Next is the control state machine: the state action leads to from c,
// with changed false when the rollout is already there (asking twice is not
// an error). Aborted is final: nothing leaves it.
func Next(c events.Control, action events.ControlAction) (next events.RolloutState, changed bool, err error) {
	current := c.State
	if current == "" {
		current = events.StateRunning
	}
	switch action {
	case events.ActionPause:
		next = events.StatePaused
	case events.ActionResume:
		next = events.StateRunning
	case events.ActionAbort:
		next = events.StateAborted
	default:
		return current, false, fmt.Errorf("unknown rollout action %q (want pause, resume or abort)", action)
	}
	switch current {
	case next:
		return current, false, nil
	case events.StateAborted:
		return current, false, fmt.Errorf("%w; an aborted rollout cannot %s (replay the event to run it again)", ErrAborted, action)
	}
	return next, true, nil
}

// ErrAborted marks an action asked of a rollout that was aborted, which is
// final.
var ErrAborted = errors.New("the rollout was aborted")

// maxCASAttempts bounds the read-modify-write loop when another writer
// keeps changing the record under us.
const maxCASAttempts = 5

// Store reads and writes control records. They are kept until their
// rollout settles, then age out with it (Keeper).
type Store struct {
	kv jetstream.KeyValue
	js jetstream.JetStream
}

// Open opens the control bucket (events.Setup creates it).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, events.BucketControl)
	if err != nil {
		return nil, fmt.Errorf("control: kv %s: %w", events.BucketControl, err)
	}
	return &Store{kv: kv, js: js}, nil
}

// write stores rec as key's record at revision rev (0: a new key), with
// compare-and-set.
func (s *Store) write(ctx context.Context, key string, rec []byte, rev uint64) error {
	var err error
	if rev == 0 {
		_, err = s.kv.Create(ctx, key, rec)
	} else {
		_, err = s.kv.Update(ctx, key, rec, rev)
	}
	return err
}

// Get returns the event's control record and its revision; an event nobody
// paused or aborted is running, at revision 0.
func (s *Store) Get(ctx context.Context, eventID string) (events.Control, uint64, error) {
	entry, err := s.kv.Get(ctx, events.ControlKey(eventID))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return events.Control{State: events.StateRunning}, 0, nil
	case err != nil:
		return events.Control{}, 0, fmt.Errorf("control: read %s: %w", eventID, err)
	}
	c, err := events.UnmarshalControl(entry.Value())
	if err != nil {
		return events.Control{State: events.StateRunning}, entry.Revision(), fmt.Errorf("%w: %s: %w", ErrUnreadable, eventID, err)
	}
	return c, entry.Revision(), nil
}

// GetAtLeader is Get as the control bucket's leader answers it (a message
// get, bus.KeyAtLeader), not any replica, one behind it among them: for a
// mark acted on against the user's latest word, such as a plan refused
// because its rollout settled, which `kvlive dlq retry` has just reopened.
func (s *Store) GetAtLeader(ctx context.Context, eventID string) (events.Control, error) {
	body, ok, err := bus.KeyAtLeader(ctx, s.js, events.BucketControl, events.ControlKey(eventID))
	switch {
	case err != nil:
		return events.Control{}, fmt.Errorf("control: read %s: %w", eventID, err)
	case !ok:
		return events.Control{State: events.StateRunning}, nil
	}
	c, err := events.UnmarshalControl(body)
	if err != nil {
		return events.Control{State: events.StateRunning}, fmt.Errorf("%w: %s: %w", ErrUnreadable, eventID, err)
	}
	return c, nil
}

// ErrUnreadable marks a control record that does not decode. It affects
// its own event alone; Apply with force overwrites it.
var ErrUnreadable = errors.New("control record unreadable")

// Apply moves the event's rollout by action, with compare-and-set against
// the revision it read, retrying when another writer got in between. It
// returns the resulting record and whether this call changed it. An event
// that does not exist yet can be paused or aborted ahead of time: its
// plans are held (or skipped) as soon as they arrive.
//
// An unreadable record is an error, unless force is set: then it is
// overwritten as if the rollout were running.
func (s *Store) Apply(ctx context.Context, eventID string, action events.ControlAction, reason, by string, now time.Time, force bool) (events.Control, bool, error) {
	return s.Update(ctx, eventID, force, step(nil, action, reason, by, now))
}

// ApplyIf is Apply on the condition that the record is still the one a
// decision was made on (seen): a gate that tripped, or passed and waits for
// a promote, on what it read, never overwrites an operator's promote, pause
// or resume that landed in between. changed is false when the record
// moved on.
func (s *Store) ApplyIf(ctx context.Context, eventID string, seen events.Control, action events.ControlAction, reason, by string, now time.Time) (events.Control, bool, error) {
	return s.Update(ctx, eventID, false, step(&seen, action, reason, by, now))
}

// step is the change Apply and ApplyIf make: action, by by at now, on a
// record that is still at seen's step when seen is set.
func step(seen *events.Control, action events.ControlAction, reason, by string, now time.Time) func(*events.Control) (bool, error) {
	return func(c *events.Control) (bool, error) {
		if seen != nil && !sameStep(*c, *seen) {
			return false, nil
		}
		next, changed, err := Next(*c, action)
		if err != nil || !changed {
			return false, err
		}
		c.State, c.Reason, c.By, c.At, c.ResumeAt, c.Awaiting = next, reason, by, now.UTC(), time.Time{}, ""
		return true, nil
	}
}

// WindowBy is who the control records name for a restart window's pauses
// and resumes.
const WindowBy = "kvlive restart window"

// PauseUntil pauses a running rollout outside its restart window until
// resumeAt, when the window opens (ResumeDue resumes it then). A rollout
// paused or aborted already is left as it is: an operator's pause is not
// lifted by a window opening. changed says whether this call paused it.
func (s *Store) PauseUntil(ctx context.Context, eventID, reason string, now, resumeAt time.Time) (bool, error) {
	_, changed, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		if c.State != "" && c.State != events.StateRunning {
			return false, nil
		}
		c.State, c.Reason, c.By, c.At, c.ResumeAt = events.StatePaused, reason, WindowBy, now.UTC(), resumeAt.UTC()
		return true, nil
	})
	return changed, err
}

// ResumeDue resumes a rollout its restart window paused once the window
// has opened (ResumeAt passed); any other rollout is left as it is.
func (s *Store) ResumeDue(ctx context.Context, eventID string, now time.Time) (bool, error) {
	_, changed, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		if c.State != events.StatePaused || c.ResumeAt.IsZero() || now.Before(c.ResumeAt) {
			return false, nil
		}
		c.State, c.Reason, c.By, c.At, c.ResumeAt = events.StateRunning, "its restart window opened", WindowBy, now.UTC(), time.Time{}
		return true, nil
	})
	return changed, err
}

// AwaitConfirm pauses a rollout at its first planning until its confirm
// webhook answers about its first batch (the rollout controller asks it,
// and ConfirmAnswered records the answer). A rollout with a control record
// already (paused or aborted ahead, or planned before: a redelivered
// event) is left as it is. It returns the record as it stands.
func (s *Store) AwaitConfirm(ctx context.Context, eventID, reason string, now time.Time) (events.Control, error) {
	c, _, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		if !c.At.IsZero() || (c.State != "" && c.State != events.StateRunning) {
			return false, nil
		}
		c.State, c.Reason, c.By, c.At, c.Awaiting = events.StatePaused, reason, GatedBy, now.UTC(), events.AwaitingConfirm
		return true, nil
	})
	return c, err
}

// ConfirmAnswered records the confirm webhook's answer about a rollout
// AwaitConfirm paused, unless the record moved on since seen (an operator
// resumed, paused or aborted it meanwhile): a yes resumes the rollout, a
// no leaves it paused (or aborts it, when abort is set) with the reason.
// It returns whether this call wrote the record.
func (s *Store) ConfirmAnswered(ctx context.Context, eventID string, seen events.Control, yes, abort bool, reason string, now time.Time) (bool, error) {
	_, changed, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		if !sameStep(*c, seen) || c.Awaiting != events.AwaitingConfirm {
			return false, nil
		}
		state := events.StatePaused
		switch {
		case yes:
			state = events.StateRunning
		case abort:
			state = events.StateAborted
		}
		c.State, c.Reason, c.By, c.At, c.Awaiting = state, reason, GatedBy, now.UTC(), ""
		return true, nil
	})
	return changed, err
}

// sameStep reports whether a control record is still at the step seen:
// the same state, set at the same time, and the same batch released and
// gated at the same times (a gate's note may differ).
func sameStep(c, seen events.Control) bool {
	return c.State == seen.State && c.At.Equal(seen.At) && c.By == seen.By &&
		c.Batch == seen.Batch && c.BatchAt.Equal(seen.BatchAt) && c.GateAt.Equal(seen.GateAt)
}

// Update changes the event's record with change, by compare-and-set against
// the revision it read, retrying (change decides again on what it finds)
// when another writer got in between. change returns false to leave the
// record as it is. It returns the resulting record and whether this call
// wrote it. An unreadable record is an error unless force is set (then
// change sees a running rollout).
func (s *Store) Update(ctx context.Context, eventID string, force bool, change func(*events.Control) (bool, error)) (events.Control, bool, error) {
	for range maxCASAttempts {
		current, rev, err := s.Get(ctx, eventID)
		if errors.Is(err, ErrUnreadable) && !force {
			return current, false, fmt.Errorf("%w; --force overwrites it", err)
		}
		if err != nil && !errors.Is(err, ErrUnreadable) {
			return current, false, err
		}
		c := current
		c.Pauses = slices.Clone(current.Pauses)
		changed, err := change(&c)
		if err != nil || !changed {
			return current, false, err
		}
		c.NotePause(current)
		rec, err := events.MarshalControl(c)
		if err != nil {
			return current, false, err
		}
		err = s.write(ctx, events.ControlKey(eventID), rec, rev)
		switch {
		case err == nil:
			return c, true, nil
		case events.Conflict(err):
			continue // someone else wrote first: decide again on what they wrote
		default:
			return current, false, fmt.Errorf("control: write %s: %w", eventID, err)
		}
	}
	return events.Control{}, false, fmt.Errorf("control: %s kept changing under %d attempts to change it", eventID, maxCASAttempts)
}

// OpenBatch records that batch of the event's rollout is released, unless
// it (or a later one) already is, or the rollout is paused or aborted. Of
// several replicas deciding at once, one wins.
func (s *Store) OpenBatch(ctx context.Context, eventID string, batch int, now time.Time) (bool, error) {
	_, opened, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		if c.State != events.StateRunning || c.Batch >= batch {
			return false, nil
		}
		c.Batch, c.BatchAt, c.GateAt, c.Gate = batch, now.UTC(), time.Time{}, ""
		return true, nil
	})
	return opened, err
}

// PassGate records that the released batch passed its gate at now, with
// what the gate found; false when it was recorded already or the rollout
// moved on.
func (s *Store) PassGate(ctx context.Context, eventID string, batch int, gate string, now time.Time) (bool, error) {
	_, passed, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		if c.Batch != batch || !c.GateAt.IsZero() || c.State == events.StateAborted {
			return false, nil
		}
		c.GateAt, c.Gate = now.UTC(), gate
		return true, nil
	})
	return passed, err
}

// MarkSettled records that the rollout settled at now, unless the record
// moved on since seen was read (a step, a reopening) or says so already:
// the caller found the rollout settled on seen. It returns whether this
// call marked it.
func (s *Store) MarkSettled(ctx context.Context, eventID string, seen events.Control, now time.Time) (bool, error) {
	_, marked, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		if !c.Settled.IsZero() || !sameStep(*c, seen) || !c.Reopened.Equal(seen.Reopened) {
			return false, nil
		}
		c.Settled = now.UTC()
		return true, nil
	})
	return marked, err
}

// Reopen lets plans of a settled rollout through again, before `kvlive
// dlq retry` sends one back; a keeper deciding meanwhile that the
// rollout settled does not mark it (MarkSettled sees the reopening).
func (s *Store) Reopen(ctx context.Context, eventID string, now time.Time) error {
	_, _, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		c.Settled, c.Reopened = time.Time{}, now.UTC()
		return true, nil
	})
	return err
}

// ErrRetried is a retry of VMs another retry of the rollout took already.
var ErrRetried = errors.New("retried already")

// ClaimRetry records that retry retryID takes the rollout's VMs (UIDs)
// vms, unless another retry took any of them since the caller looked: of
// two retries at once, one goes ahead.
func (s *Store) ClaimRetry(ctx context.Context, eventID, retryID string, vms []string, by string, now time.Time) error {
	_, _, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		for _, uid := range vms {
			if other := c.RetriedBy(uid); other != "" {
				return false, fmt.Errorf("%w: VM %s of %s is being retried as %s", ErrRetried, uid, eventID, other)
			}
		}
		c.Retries = append(c.Retries, events.Retry{EventID: retryID, VMs: vms, By: by, At: now.UTC()})
		return true, nil
	})
	return err
}

// ReleaseRetry forgets retry retryID of the rollout, whose event could not
// be published: its VMs may be retried again.
func (s *Store) ReleaseRetry(ctx context.Context, eventID, retryID string) error {
	_, _, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		n := len(c.Retries)
		c.Retries = slices.DeleteFunc(c.Retries, func(r events.Retry) bool { return r.EventID == retryID })
		return len(c.Retries) != n, nil
	})
	return err
}

// ErrNothingToPromote is a promote of a rollout with no batch left to release.
var ErrNothingToPromote = errors.New("nothing to promote")

// ErrPromotedMeanwhile is a promote that found another batch released
// since the operator looked: it releases nothing, so two promotes at once
// release one batch, not two.
var ErrPromotedMeanwhile = errors.New("released meanwhile")

// promotedBy starts the Gate of a batch a promote released, until the
// batch passes its gate.
const promotedBy = "promoted by "

// Promote releases batch seen+1 now, whatever its gate and pause say, and
// resumes the rollout if it was paused: seen is the last released batch
// the operator saw, last the rollout's last batch. A record that has moved
// past seen since (another promote, the gate) is ErrPromotedMeanwhile. So
// is, unless named says the operator named the batch to release, a batch
// seen that a promote released and that has not passed its gate yet: two
// promotes read one after the other would otherwise release two batches.
// It returns the batch it released.
func (s *Store) Promote(ctx context.Context, eventID string, seen, last int, named bool, by string, now time.Time) (int, error) {
	c, _, err := s.Update(ctx, eventID, false, func(c *events.Control) (bool, error) {
		switch {
		case c.State == events.StateAborted:
			return false, errors.New("the rollout was aborted; an aborted rollout cannot be promoted")
		case c.Batch >= last:
			return false, fmt.Errorf("%w: batch %d of %d is the last and released", ErrNothingToPromote, c.Batch+1, last+1)
		case c.Batch != seen:
			return false, fmt.Errorf("%w: batch %d of %d was released since batch %d was seen (%s); nothing more is",
				ErrPromotedMeanwhile, c.Batch+1, last+1, seen+1, cmp.Or(c.Gate, "by its gate"))
		case !named && strings.HasPrefix(c.Gate, promotedBy) && c.GateAt.IsZero():
			return false, fmt.Errorf("%w: batch %d of %d was %s at %s and has not passed its gate; nothing more is (to release batch %d now anyway, name it: --batch %d)",
				ErrPromotedMeanwhile, c.Batch+1, last+1, c.Gate, c.BatchAt.Format(time.RFC3339), c.Batch+2, c.Batch+2)
		}
		c.Batch, c.BatchAt, c.GateAt = c.Batch+1, now.UTC(), time.Time{}
		c.Gate = promotedBy + by
		c.State, c.Reason, c.By, c.At, c.ResumeAt, c.Awaiting = events.StateRunning, "promoted", by, now.UTC(), time.Time{}, ""
		return true, nil
	})
	return c.Batch, err
}

// State is one event's control record with its KV revision.
type State struct {
	events.Control
	Revision uint64
}

// Watch keeps every control record in memory, fed by a KV watch, so the
// applier asks about each plan without a round trip.
type Watch struct {
	mu     sync.RWMutex
	states map[string]State
}

// StartWatch loads every record, then follows changes until ctx ends,
// calling changed (when not nil) after each update it applies, outside any
// lock. It returns once the initial records are loaded.
func (s *Store) StartWatch(ctx context.Context, changed func(eventID string, st State)) (*Watch, error) {
	watcher, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("control: watch: %w", err)
	}
	w := &Watch{states: map[string]State{}}
	apply := func(entry jetstream.KeyValueEntry) (string, State, bool) {
		id := entry.Key()
		if entry.Operation() != jetstream.KeyValuePut {
			w.mu.Lock()
			delete(w.states, id)
			w.mu.Unlock()
			return id, State{Control: events.Control{State: events.StateRunning}, Revision: entry.Revision()}, true
		}
		c, err := events.UnmarshalControl(entry.Value())
		if err != nil {
			return "", State{}, false // an unreadable record changes nothing
		}
		st := State{Control: c, Revision: entry.Revision()}
		w.mu.Lock()
		// Running is what an event without a record is: keep only the
		// others and settled rollouts, so the map grows with pauses,
		// aborts and the rollouts of the replay horizon, not with every
		// event being planned.
		if c.State == events.StateRunning && c.Settled.IsZero() {
			delete(w.states, id)
		} else {
			w.states[id] = st
		}
		w.mu.Unlock()
		return id, st, true
	}
	// Initial values, up to the nil marker.
	for entry := range watcher.Updates() {
		if entry == nil {
			break
		}
		apply(entry)
	}
	go func() {
		defer func() { _ = watcher.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case entry, ok := <-watcher.Updates():
				if !ok {
					return
				}
				if entry == nil {
					continue
				}
				if id, st, ok := apply(entry); ok && changed != nil {
					changed(id, st)
				}
			}
		}
	}()
	return w, nil
}

// Paused counts the rollouts paused, as last seen.
func (w *Watch) Paused() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	n := 0
	for _, st := range w.states {
		if st.State == events.StatePaused {
			n++
		}
	}
	return n
}

// Due lists the rollouts a restart window paused whose window has opened
// by now (ResumeAt passed), as last seen.
func (w *Watch) Due(now time.Time) []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	var due []string
	for id, st := range w.states {
		if st.State == events.StatePaused && !st.ResumeAt.IsZero() && !now.Before(st.ResumeAt) {
			due = append(due, id)
		}
	}
	return due
}

// Awaiting lists the rollouts paused until their confirm webhook answers
// (Store.AwaitConfirm), as last seen.
func (w *Watch) Awaiting() map[string]events.Control {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := map[string]events.Control{}
	for id, st := range w.states {
		if st.State == events.StatePaused && st.Awaiting == events.AwaitingConfirm {
			out[id] = st.Control
		}
	}
	return out
}

// WindowPause says why a restart rollout waits: outside window, which
// opens at opens (shown in the window's own time zone).
func WindowPause(w events.Window, opens time.Time) string {
	if loc, err := time.LoadLocation(w.TimeZone); err == nil {
		opens = opens.In(loc)
	}
	return fmt.Sprintf("outside its restart window %s: waits until it opens at %s", w, opens.Format(time.RFC3339))
}

// Of returns the event's state as last seen; running when there is no record.
func (w *Watch) Of(eventID string) State {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if st, ok := w.states[eventID]; ok {
		return st
	}
	return State{Control: events.Control{State: events.StateRunning}}
}
