package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/duration"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

// The kinds of event an EventSummary describes.
const (
	EventInstancetypeChange = "instancetype-change"
	EventPreferenceChange   = "preference-change"
	EventSwitch             = "switch"
	EventUndo               = "undo"
	EventRestart            = "restart"
)

// EventSummary is one event and how far its rollout got.
type EventSummary struct {
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	// Type is EventInstancetypeChange, EventPreferenceChange, EventSwitch,
	// EventUndo or EventRestart.
	Type string `json:"type"`
	// Object is the changed object, or "from → to" for a switch.
	Object        string `json:"object"`
	Generation    int64  `json:"generation,omitempty"`
	OldGeneration int64  `json:"oldGeneration,omitempty"`
	// Planned is how many VMs the planner planned; nil until it recorded
	// the rollout.
	Planned *int `json:"planned"`
	// PlannedCounts are the planned actions per result.
	PlannedCounts map[events.Result]int `json:"plannedCounts,omitempty"`
	// Outcomes counts the latest outcome per VM by result.
	Outcomes map[events.Result]int `json:"outcomes"`
	// Verdicts counts KubeVirt's verdicts on the VMs moved, Differ those
	// other than kvlive's prediction, Awaited the moved VMs without one.
	Verdicts map[events.Observed]int `json:"verdicts,omitempty"`
	Differ   int                     `json:"differ,omitempty"`
	Awaited  int                     `json:"awaited,omitempty"`
	// TraceID is the trace `kvlive trace` shows for the event.
	TraceID string `json:"traceId,omitempty"`
	// State is the rollout's phase from its accounting (running, paused,
	// aborted, complete, incomplete…); empty until it was planned.
	State rollout.Phase `json:"state,omitempty"`
	// Unaccounted is, for an incomplete rollout, how many planned VMs have
	// neither an outcome nor a dead letter.
	Unaccounted int `json:"unaccounted,omitempty"`
	// ControlError says why the event's control record could not be read;
	// it concerns this event alone.
	ControlError string `json:"controlError,omitempty"`
	// PolicyError says why the rollout policy asked for was refused (the
	// rollout was paused before anything moved).
	PolicyError string `json:"policyError,omitempty"`
	// Settled is how many planned VMs have an outcome or a dead letter.
	Settled int `json:"settled"`
	// Batches are a batched rollout's batch sizes, of which Batch (from 0)
	// is the last released.
	Batches []int `json:"batches,omitempty"`
	Batch   int   `json:"batch,omitempty"`
	// DeadLetter, for an event the planner refused (a forged or malformed
	// request, an object it could not plan), is the reason it gave: such an
	// event is never planned.
	DeadLetter string `json:"deadLetter,omitempty"`
}

// Events returns the newest limit events (every event when limit <= 0),
// newest last, each with its rollout record's counts, the counts of its
// VMs' latest outcomes and the phase its accounting gives.
func (r *Reader) Events(ctx context.Context, limit int) ([]EventSummary, error) {
	list, err := r.readEvents(ctx, limit)
	if err != nil || len(list) == 0 {
		return list, err
	}
	return list, r.addAccounts(ctx, list)
}

// HasEvent reports whether the events stream holds an event with id: one
// published (a switch just requested) that the planner may not have
// planned yet.
func (r *Reader) HasEvent(ctx context.Context, id string) (bool, error) {
	list, err := r.readEvents(ctx, 0)
	for _, e := range list {
		if e.ID == id {
			return true, nil
		}
	}
	return false, err
}

// addAccounts fills each event in from its accounting, read by subject
// filter: an event not planned yet has none, and an unreadable control
// record is noted on its own event only.
func (r *Reader) addAccounts(ctx context.Context, list []EventSummary) error {
	dead, err := r.deadEvents(ctx)
	if err != nil {
		return err
	}
	for i := range list {
		e := &list[i]
		if e.ID == "" {
			continue
		}
		e.DeadLetter = dead[e.ID]
		a, err := rollout.AccountOf(ctx, r.js, e.ID)
		if err == nil {
			err = rollout.CountVerdicts(ctx, r.js, &a)
		}
		switch {
		case errors.Is(err, rollout.ErrNoRollout):
			continue
		case err != nil:
			return err
		}
		e.Verdicts, e.Differ, e.Awaited = a.Verdicts, a.Differ, a.Awaited
		if a.Recorded {
			e.Planned, e.PlannedCounts, e.TraceID, e.PolicyError = &a.Planned, a.Record.Counts, a.Record.TraceID, a.Record.PolicyError
		}
		if len(a.Latest) > 0 {
			e.Outcomes = a.Outcomes
		}
		e.State, e.Unaccounted, e.ControlError = a.Phase, a.Unaccounted, a.ControlError
		e.Settled, e.Batches, e.Batch = a.Settled(), a.Batches, a.Batch
	}
	return nil
}

// deadEvents maps the id of each event the planner dead-lettered to the
// reason it gave (the last one, if it refused it more than once).
func (r *Reader) deadEvents(ctx context.Context) (map[string]string, error) {
	dead := map[string]string{}
	if _, err := r.js.Stream(ctx, events.StreamDLQ); errors.Is(err, jetstream.ErrStreamNotFound) {
		return dead, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.DeadEvents()}}
	err := r.scan(ctx, events.StreamDLQ, cfg, func(m jetstream.Msg) {
		if env, err := events.Parse(m.Data()); err == nil && env.ID != "" {
			dead[env.ID] = m.Headers().Get(events.HeaderDeadReason)
		}
	})
	return dead, err
}

// readEvents reads the tail of the events stream: every message in it is
// one event, so the last limit sequences hold the last limit events.
func (r *Reader) readEvents(ctx context.Context, limit int) ([]EventSummary, error) {
	s, err := r.stream(ctx, events.StreamEvents)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{}
	if last := s.CachedInfo().State.LastSeq; limit > 0 && last > uint64(limit) {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, last-uint64(limit)+1
	}
	var list []EventSummary
	index := map[string]int{}
	err = r.scan(ctx, events.StreamEvents, cfg, func(m jetstream.Msg) {
		e, ok := summarize(m.Data())
		if !ok {
			return
		}
		// A re-emit after the duplicate window repeats an id: keep the last.
		if i, seen := index[e.ID]; seen {
			list[i].ID = ""
		}
		index[e.ID] = len(list)
		list = append(list, e)
	})
	out := list[:0]
	for _, e := range list {
		if e.ID != "" {
			out = append(out, e)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, err
}

// summarize decodes one events-stream message; ok is false for a message
// the planner would dead-letter.
func summarize(body []byte) (EventSummary, bool) {
	env, err := events.Parse(body)
	if err != nil {
		return EventSummary{}, false
	}
	e := EventSummary{ID: env.ID, Time: env.Time, Outcomes: map[events.Result]int{}}
	switch env.Type {
	case events.TypeInstancetypeChanged, events.TypePreferenceChanged:
		var c events.Changed
		if env.Into(&c) != nil {
			return e, false
		}
		e.Type = EventInstancetypeChange
		if env.Type == events.TypePreferenceChanged {
			e.Type = EventPreferenceChange
		}
		e.Object, e.Generation, e.OldGeneration = c.Object.String(), c.Generation, c.OldGeneration
	case events.TypeSwitchRequested:
		var s events.SwitchRequest
		if env.Into(&s) != nil {
			return e, false
		}
		e.Type, e.Object = EventSwitch, s.From.String()+" → "+s.To.String()
	case events.TypeUndoRequested:
		var u events.UndoRequest
		if env.Into(&u) != nil {
			return e, false
		}
		e.Type, e.Object = EventUndo, "undo of "+events.ShortEventID(u.Of)
	case events.TypeRestartRequested:
		var r events.RestartRequest
		if env.Into(&r) != nil {
			return e, false
		}
		e.Type, e.Object = EventRestart, "restart of "+r.Object.String()
		if r.After != "" {
			e.Object += " after " + events.ShortEventID(r.After)
		}
	default:
		return e, false
	}
	return e, true
}

// Listing is how a list of events is written: as a table (Format table or
// wide, cut to Width when it is not zero) with ages measured at Now, or as
// data (json, yaml).
type Listing struct {
	Format printer.Format
	Width  int
	Now    time.Time
}

// shownIDs is how each event's id is shown: whole in a wide table, else
// its short form (vmcf/2f6c1a3b/5, which every command takes), or whole
// where two events of the list share one. The id is never cut: it is the
// column a user copies.
func (l Listing) shownIDs(list []EventSummary, f printer.Format) map[string]string {
	ids := make(map[string]string, len(list))
	uses := map[string]int{}
	for _, e := range list {
		short := e.ID
		if f != printer.FormatWide {
			short = events.ShortEventID(e.ID)
		}
		ids[e.ID] = short
		uses[short]++
	}
	for id, short := range ids {
		if uses[short] > 1 {
			ids[id] = id
		}
	}
	return ids
}

// WriteEvents writes list, newest last.
func (l Listing) WriteEvents(w io.Writer, list []EventSummary) error {
	f, width := l.Format, l.Width
	if !f.Human() {
		return printer.WriteData(w, f, printer.NonNil(list))
	}
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no events recorded")
		return err
	}
	t := printer.NewTable(
		printer.Column{Name: "ID"},
		printer.Column{Name: "AGE"},
		printer.Column{Name: "TYPE"},
		printer.Column{Name: "OBJECT", Fit: true},
		printer.Column{Name: "GEN"},
		printer.Column{Name: "PLANNED", Fit: true, Min: 8},
		printer.Column{Name: "OUTCOMES", Fit: true, Min: 10},
		printer.Column{Name: "VERDICTS", Fit: true, Min: 10},
		printer.Column{Name: "TIME", Wide: true},
		printer.Column{Name: "TRACE", Wide: true},
	)
	at, ids := l.Now, l.shownIDs(list, f)
	for _, e := range list {
		t.Append(ids[e.ID], duration.HumanDuration(at.Sub(e.Time)), strings.TrimSuffix(e.Type, "-change"), e.Object,
			generation(e), planned(e), tally(e.Outcomes)+stateNote(e), verdictTally(e), e.Time.UTC().Format(time.RFC3339), orDash(e.TraceID))
	}
	return t.Write(w, f, width)
}

// WriteRollouts writes list newest first, as rollouts: state, progress and
// batch.
func (l Listing) WriteRollouts(w io.Writer, list []EventSummary) error {
	f, width := l.Format, l.Width
	newest := slices.Clone(list)
	slices.Reverse(newest)
	if !f.Human() {
		return printer.WriteData(w, f, printer.NonNil(newest))
	}
	if len(newest) == 0 {
		_, err := fmt.Fprintln(w, "no rollouts recorded")
		return err
	}
	t := printer.NewTable(
		printer.Column{Name: "ID"},
		printer.Column{Name: "AGE"},
		printer.Column{Name: "OBJECT", Fit: true},
		printer.Column{Name: "STATE"},
		printer.Column{Name: "PROGRESS"},
		printer.Column{Name: "BATCH"},
		printer.Column{Name: "OUTCOMES", Fit: true, Min: 10},
		printer.Column{Name: "VERDICTS", Fit: true, Min: 10},
		printer.Column{Name: "TYPE", Wide: true},
		printer.Column{Name: "TRACE", Wide: true},
	)
	at, ids := l.Now, l.shownIDs(newest, f)
	for _, e := range newest {
		state, progress, batch := string(e.State), "-", "-"
		switch {
		case e.Planned == nil && e.DeadLetter != "":
			state = string(rollout.PhaseRefused)
		case state == "":
			state = string(rollout.PhasePending)
		}
		if e.Planned != nil {
			progress = fmt.Sprintf("%d/%d", e.Settled, *e.Planned)
		}
		if len(e.Batches) > 0 {
			batch = fmt.Sprintf("%d/%d", e.Batch+1, len(e.Batches))
		}
		t.Append(ids[e.ID], duration.HumanDuration(at.Sub(e.Time)), e.Object, state, progress, batch, tally(e.Outcomes), verdictTally(e),
			strings.TrimSuffix(e.Type, "-change"), orDash(e.TraceID))
	}
	return t.Write(w, f, width)
}

// stateNote tells the rollout's phase in the outcomes column.
func stateNote(e EventSummary) string {
	note := ""
	switch e.State {
	case "", rollout.PhaseComplete, rollout.PhaseRunning:
	case rollout.PhaseIncomplete:
		note = fmt.Sprintf(", incomplete: %d unaccounted", e.Unaccounted)
	default:
		note = ", " + string(e.State)
	}
	if e.ControlError != "" {
		note += ", control record unreadable"
	}
	if e.PolicyError != "" {
		note += ", rollout policy refused"
	}
	return note
}

// generation renders "4 → 5", or "5" when the previous one is unknown.
func generation(e EventSummary) string {
	switch {
	case e.Generation == 0:
		return "-"
	case e.OldGeneration == 0:
		return strconv.FormatInt(e.Generation, 10)
	}
	return fmt.Sprintf("%d → %d", e.OldGeneration, e.Generation)
}

func planned(e EventSummary) string {
	if e.Planned == nil && e.DeadLetter != "" {
		return "never: dead-lettered (" + e.DeadLetter + ")"
	}
	if e.Planned == nil {
		return "not yet"
	}
	return withCounts(*e.Planned, e.PlannedCounts)
}

// tally renders counts as "8 (5 live, 3 restart)", or "-" when empty.
func tally(counts map[events.Result]int) string {
	n := 0
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return "-"
	}
	return withCounts(n, counts)
}

// withCounts renders "8 (5 live, 3 restart)", or "8" without counts.
func withCounts(n int, counts map[events.Result]int) string {
	if list := countList(counts, false); list != "" {
		return fmt.Sprintf("%d (%s)", n, list)
	}
	return strconv.Itoa(n)
}

// verdictTally renders KubeVirt's verdicts on an event's moved VMs: "7 live,
// 2 awaited; 1 differs", or "-" when none moved.
func verdictTally(e EventSummary) string {
	counts := map[string]int{"awaited": e.Awaited}
	n := e.Awaited
	for v, c := range e.Verdicts {
		counts[string(v)] = c
		n += c
	}
	if n == 0 {
		return "-"
	}
	list := VerdictList(counts)
	if e.Differ > 0 {
		list += fmt.Sprintf("; %d differ", e.Differ)
	}
	return list
}
