package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/rollout"
)

// RolloutStatus is where one event's rollout stands: what an operator asked
// of it, how many VMs it planned, how many have an outcome and how many
// plans are held by a pause.
type RolloutStatus struct {
	EventID string         `json:"eventId"`
	Control events.Control `json:"control"`
	// Recorded is false while the planner has not recorded the event.
	Recorded bool                  `json:"recorded"`
	Planned  int                   `json:"planned"`
	Outcomes map[events.Result]int `json:"outcomes"`
	Held     int                   `json:"held"`
}

// Status reads eventID's rollout status.
func (r *Reader) Status(ctx context.Context, eventID string) (RolloutStatus, error) {
	st := RolloutStatus{EventID: eventID, Outcomes: map[events.Result]int{}}
	store, err := rollout.Open(ctx, r.js)
	if err != nil {
		return st, err
	}
	if st.Control, _, err = store.Get(ctx, eventID); err != nil {
		return st, err
	}
	kv, err := r.rollouts(ctx)
	if err != nil {
		return st, err
	}
	rec, ok, err := rolloutRecord(ctx, kv, eventID)
	if err != nil {
		return st, err
	}
	st.Recorded, st.Planned = ok, rec.Planned
	outs, err := r.Outcomes(ctx, OutcomeFilter{EventID: eventID})
	if err != nil {
		return st, err
	}
	for _, o := range outs {
		st.Outcomes[o.Result]++
	}
	st.Held, err = r.held(ctx, eventID)
	return st, err
}

// held counts the event's plans parked in the held stream.
func (r *Reader) held(ctx context.Context, eventID string) (int, error) {
	return countSubjects(ctx, r.js, events.StreamHeld, events.HeldOf(eventID))
}

// countSubjects counts the messages of stream under filter, from the
// stream's per-subject state: no message is read.
func countSubjects(ctx context.Context, js jetstream.JetStream, stream, filter string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("inspect: stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, fmt.Errorf("inspect: stream %s: %w", stream, err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n, nil
}

// WriteStatus prints a status as a few lines (table) or as JSON.
func WriteStatus(w io.Writer, st RolloutStatus, format string) error {
	if format == "json" {
		return writeJSON(w, st)
	}
	state := string(st.Control.State)
	if st.Control.By != "" || st.Control.Reason != "" {
		state += fmt.Sprintf(" (%s)", st.Control.Describe())
	}
	if !st.Control.At.IsZero() {
		state += " since " + st.Control.At.Format(time.RFC3339)
	}
	total := 0
	for _, n := range st.Outcomes {
		total += n
	}
	planned := "not planned yet"
	if st.Recorded {
		planned = fmt.Sprintf("%d VMs", st.Planned)
	}
	_, err := fmt.Fprintf(w, "event:    %s\nstate:    %s\nplanned:  %s\noutcomes: %s\nheld:     %d\n",
		st.EventID, state, planned, withCounts(total, st.Outcomes), st.Held)
	return err
}
