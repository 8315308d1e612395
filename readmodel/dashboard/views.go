package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"kvlive/drift"
	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/readmodel/inspect"
	"kvlive/rollout"
)

// Limits of what one page shows: the newest rollouts, a rollout's VMs and
// spans, the newest dead letters. A page says how many more there are.
const (
	maxRollouts    = 200
	maxVMRows      = 500
	maxSpans       = 400
	maxDeadLetters = 500
)

// readBound bounds the reads behind one page or one live update.
const readBound = 30 * time.Second

// rolloutsView is the rollouts page.
type rolloutsView struct {
	Rollouts []rolloutRow
	Now      time.Time
}

// rolloutRow is one rollout in the list.
type rolloutRow struct {
	inspect.EventSummary
	// Moved counts the VMs whose latest outcome moved them.
	Moved      int
	Migrations *rollout.Migrations
	// Note says what reading the rollout's migrations ran into.
	Note string
}

// rollouts serves the rollouts, newest first.
func (s *Server) rollouts(w http.ResponseWriter, r *http.Request) {
	v, err := s.rolloutsView(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	page(w, http.StatusOK, v.page)
}

// rolloutsView reads the newest rollouts, and the migrations of those still
// moving VMs.
func (s *Server) rolloutsView(ctx context.Context) (rolloutsView, error) {
	ctx, cancel := context.WithTimeout(ctx, readBound)
	defer cancel()
	list, err := s.reader.Events(ctx, maxRollouts)
	if err != nil {
		return rolloutsView{}, err
	}
	now := s.cfg.Now()
	v := rolloutsView{Now: now}
	for _, e := range slices.Backward(list) {
		row := rolloutRow{EventSummary: e, Moved: moved(e.Outcomes)}
		if e.State == rollout.PhaseRunning || e.State == rollout.PhasePaused || e.State == rollout.PhaseVerifying {
			a, err := rollout.AccountOf(ctx, s.cfg.JetStream, e.ID)
			if err == nil {
				err = rollout.CountMigrations(ctx, s.cfg.JetStream, &a, now)
			}
			if err != nil {
				row.Note = "migrations unread: " + err.Error()
			}
			row.Migrations = a.Migrations
		}
		v.Rollouts = append(v.Rollouts, row)
	}
	return v, nil
}

// moved counts the outcomes that moved a VM's pin.
func moved(outcomes map[events.Result]int) int {
	n := 0
	for r, c := range outcomes {
		if r.Moves() {
			n += c
		}
	}
	return n
}

// rolloutView is a rollout's page.
type rolloutView struct {
	ID string
	A  rollout.Account
	// Status is `kvlive rollout status`'s text, word for word.
	Status   string
	Progress string
	Batches  []batchView
	// VMs are the rows the filter keeps (at most maxVMRows of Matched);
	// Counts the rows each filter would keep.
	VMs     []inspect.Row
	Matched int
	Filter  string
	Counts  map[string]int
	Trace   traceView
	Actions []string
	// Writable says whether this dashboard shows buttons, Why how it
	// decided.
	Writable bool
	Why      string
	// Done is what the last action did, shown once after it.
	Done string
	Now  time.Time
}

// batchView is one batch of a batched rollout.
type batchView struct {
	Number, Size int
	// State says where the batch is; Class is "released", "gate" or
	// "staged", for the page's colours.
	State, Class string
}

// traceView is a rollout's trace as a waterfall.
type traceView struct {
	ID         string
	Spans      []spanView
	More       int
	Total      time.Duration
	Start, End time.Time
	Err        string
}

// spanView is one span of the waterfall: its place in the trace's window
// in per cent.
type spanView struct {
	Name, Service, Result string
	Depth                 int
	Linked, Failed        bool
	Offset, Width         float64
	Duration              string
}

// filters are the VM table's filters, in the order the page lists them.
var filters = []string{"all", "differ", "failed", "pending"}

// keeps reports whether filter keeps row: "differ", a current verdict other
// than the prediction; "failed", a VM whose latest outcome failed;
// "pending", a moved VM whose verdict is awaited, pending or queued.
func keeps(filter string, row inspect.Row) bool {
	switch filter {
	case "differ":
		return row.Differs()
	case "failed":
		return row.Result == events.ResultFailed
	case "pending":
		if !row.Result.Moves() || row.VerdictDeadline == 0 {
			return false
		}
		v := row.Current()
		return v == nil || v.Observed == events.ObservedPending || v.Observed == events.ObservedQueued
	}
	return true
}

// rolloutPage serves one rollout; an id no event has is a 404 page.
func (s *Server) rolloutPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.rolloutView(r.Context(), r.PathValue("id"), r.URL.Query().Get("vms"))
	switch {
	case errors.Is(err, rollout.ErrNoRollout) || errors.Is(err, rollout.ErrBadEventID):
		s.fail(w, r, http.StatusNotFound, "no rollout "+r.PathValue("id")+" is recorded: kvlive rollouts lists those there are")
		return
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	v.Done = s.doneNote(r.URL.Query())
	page(w, http.StatusOK, v.page)
}

// rolloutView reads a rollout's account (as rollout status does), its VMs'
// outcomes and verdicts (as outcomes does) and its trace (as trace does).
func (s *Server) rolloutView(ctx context.Context, id, filter string) (rolloutView, error) {
	ctx, cancel := context.WithTimeout(ctx, readBound)
	defer cancel()
	if !slices.Contains(filters, filter) {
		filter = "all"
	}
	a, err := s.reader.Status(ctx, id)
	if err != nil {
		return rolloutView{}, err
	}
	v := rolloutView{ID: a.EventID, A: a, Progress: inspect.ProgressLine(a), Filter: filter, Counts: map[string]int{},
		Writable: s.writable, Why: s.why, Now: s.cfg.Now()}
	var status strings.Builder
	if err := inspect.WriteStatus(&status, a, printer.FormatTable); err != nil {
		return rolloutView{}, err
	}
	v.Status = status.String()
	for i, n := range a.Batches {
		b := batchView{Number: i + 1, Size: n, State: "staged", Class: "staged"}
		switch {
		case i < a.Batch || (i == a.Batch && a.Done()):
			b.State, b.Class = "released", "released"
		case i == a.Batch && a.Control.GateAt.IsZero():
			b.State, b.Class = "released, at its gate", "gate"
		case i == a.Batch:
			b.State, b.Class = "released, passed its gate", "released"
		}
		v.Batches = append(v.Batches, b)
	}
	if a.Recorded {
		rows, err := s.reader.OutcomeRows(ctx, inspect.OutcomeFilter{EventID: a.EventID})
		if err != nil {
			return rolloutView{}, err
		}
		for _, row := range rows {
			for _, f := range filters {
				if keeps(f, row) {
					v.Counts[f]++
				}
			}
			if keeps(filter, row) {
				v.Matched++
				if len(v.VMs) < maxVMRows {
					v.VMs = append(v.VMs, row)
				}
			}
		}
		v.Trace = s.traceView(ctx, a.Record.TraceID)
	}
	v.Actions = actions(a)
	return v, nil
}

// traceView reads a trace and lays it out as a waterfall.
func (s *Server) traceView(ctx context.Context, traceID string) traceView {
	t := traceView{ID: traceID}
	if traceID == "" {
		return t
	}
	spans, err := s.reader.Spans(ctx, traceID)
	if err != nil {
		t.Err = err.Error()
		return t
	}
	tree := inspect.NewTree(traceID, spans)
	t.Start, t.End, t.Total = tree.Start, tree.End, tree.End.Sub(tree.Start)
	window := float64(max(t.Total, time.Microsecond))
	tree.Walk(func(n *inspect.Node, depth int) bool {
		if len(t.Spans) >= maxSpans {
			t.More++
			return true
		}
		result, failed := inspect.SpanResult(n.Span)
		t.Spans = append(t.Spans, spanView{
			Name: n.Span.Name, Service: n.Span.Service, Result: result, Depth: depth, Linked: n.Linked, Failed: failed,
			Offset:   100 * float64(n.Span.Start.Sub(tree.Start)) / window,
			Width:    max(0.2, 100*float64(n.Span.Duration())/window),
			Duration: inspect.FormatDuration(n.Span.Duration()),
		})
		return true
	})
	return t
}

// actions are the buttons a rollout in a's state offers, as the CLI would
// take them: pause a running one, resume a paused one, promote a batched
// one's next batch, abort one not done, undo one done (not an undo).
func actions(a rollout.Account) []string {
	var out []string
	done := a.Done()
	switch {
	case a.Phase == rollout.PhaseRefused || a.Phase == rollout.PhasePending:
		return nil
	case a.Control.State == events.StatePaused && !done:
		out = append(out, "resume")
	case a.Control.State == events.StateRunning && !done:
		out = append(out, "pause")
	}
	if len(a.Batches) > 0 && a.Batch+1 < len(a.Batches) && a.Control.State != events.StateAborted {
		out = append(out, "promote")
	}
	if !done && a.Control.State != events.StateAborted {
		out = append(out, "abort")
	}
	if done && a.Recorded && !strings.HasPrefix(a.EventID, events.UndoEventID("")) {
		out = append(out, "undo")
	}
	return out
}

// driftView is the drift page.
type driftView struct {
	Rows      []drift.Row
	Available bool
}

// driftPage serves drift per instance type and preference from the
// informer cache it was given.
func (s *Server) driftPage(w http.ResponseWriter, r *http.Request) {
	v := driftView{Available: s.cfg.Drift != nil}
	if v.Available {
		v.Rows = s.cfg.Drift()
	}
	page(w, http.StatusOK, v.page)
}

// deadLettersView is the dead-letters page.
type deadLettersView struct {
	Letters []inspect.Letter
	More    int
}

// deadLetters serves the dead letters, newest first, with their reasons.
func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readBound)
	defer cancel()
	letters, err := inspect.Store{JetStream: s.cfg.JetStream}.List(ctx)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("the dead letters could not be read: %v", err))
		return
	}
	slices.Reverse(letters)
	v := deadLettersView{Letters: letters}
	if len(letters) > maxDeadLetters {
		v.Letters, v.More = letters[:maxDeadLetters], len(letters)-maxDeadLetters
	}
	page(w, http.StatusOK, v.page)
}
