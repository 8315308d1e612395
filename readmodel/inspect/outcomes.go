package inspect

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

// OutcomeFilter selects outcomes; a zero field matches everything.
type OutcomeFilter struct {
	EventID string
	// Namespace and Name select one VM; Namespace alone, a namespace.
	Namespace string
	Name      string
	// Result is matched against the latest attempt only: a VM that failed
	// once and then went live is live.
	Result events.Result
	// Differs keeps only the VMs whose stored verdict differs from what
	// kvlive predicted (OutcomeRows).
	Differs bool
}

func (f OutcomeFilter) matches(o *events.Outcome) bool {
	return (f.EventID == "" || o.EventID == f.EventID) &&
		(f.Namespace == "" || o.VM.Namespace == f.Namespace) &&
		(f.Name == "" || o.VM.Name == f.Name)
}

// Outcomes returns the latest attempt's outcome of every VM of every event
// that f selects, ordered by event (the first to record an outcome first),
// then namespace and name.
func (r *Reader) Outcomes(ctx context.Context, f OutcomeFilter) ([]events.Outcome, error) {
	filter := events.OutcomesIn(f.Namespace)
	if f.EventID != "" {
		// The event is in the subject: read its outcomes only, however
		// many other rollouts the stream holds.
		filter = events.OutcomesOf(f.EventID, f.Namespace)
	}
	latest, err := r.latestOutcomes(ctx, filter, f.matches)
	if err != nil {
		return nil, err
	}
	outs := latest.sorted()
	if f.Result != "" {
		outs = slices.DeleteFunc(outs, func(o events.Outcome) bool { return o.Result != f.Result })
	}
	return outs, nil
}

// FindOutcomes is Outcomes for a person asking: f.EventID may be a unique
// prefix of a recorded event id, and no outcomes of an event kvlive never
// heard of is rollout.ErrNoRollout, a typo rather than an answer.
func (r *Reader) FindOutcomes(ctx context.Context, f OutcomeFilter) ([]events.Outcome, error) {
	if f.EventID != "" {
		var err error
		if f.EventID, err = rollout.ResolveEventID(ctx, r.js, f.EventID); err != nil {
			return nil, err
		}
	}
	outs, err := r.Outcomes(ctx, f)
	if err != nil || f.EventID == "" || len(outs) > 0 {
		return outs, err
	}
	return nil, rollout.Known(ctx, r.js, f.EventID)
}

// Row is one VM's latest outcome for one event with KubeVirt's verdict on
// it, once stored: what kvlive predicted next to what KubeVirt did.
type Row struct {
	events.Outcome
	Verdict *events.Verdict `json:"verdict,omitempty"`
	// Reobserved is the VM's latest re-observation (kvlive rollout
	// verify) of an unsettled verdict, if any.
	Reobserved *events.Verdict `json:"reobserved,omitempty"`
}

// Observed is the row's verdict in a word: KubeVirt's verdict (and, after
// an arrow, its latest re-observation), "awaited"
// for a moved VM without one yet, "-" for a VM that did not move or moved
// where verdicts are off.
func (r Row) Observed() string {
	switch {
	case r.Verdict != nil && r.Reobserved != nil:
		return string(r.Verdict.Observed) + "→" + string(r.Reobserved.Observed)
	case r.Verdict != nil:
		return string(r.Verdict.Observed)
	case r.Result.Moves() && r.VerdictDeadline > 0:
		return "awaited"
	}
	return "-"
}

// Current is the row's current verdict: its latest re-observation, where
// there is one, or its verdict (nil when none is stored).
func (r Row) Current() *events.Verdict {
	if r.Reobserved != nil && r.Verdict != nil {
		return r.Reobserved
	}
	return r.Verdict
}

// Differs reports a current verdict other than the prediction.
func (r Row) Differs() bool { v := r.Current(); return v != nil && !v.Observed.Matches(r.Result) }

// OutcomeRows is FindOutcomes with each VM's verdict joined in.
func (r *Reader) OutcomeRows(ctx context.Context, f OutcomeFilter) ([]Row, error) {
	outs, err := r.FindOutcomes(ctx, f)
	if err != nil || len(outs) == 0 {
		return nil, err
	}
	if f.EventID != "" {
		f.EventID = outs[0].EventID // resolved from a prefix
	}
	verdicts, err := r.verdicts(ctx, f, events.VerdictsIn(f.Namespace, f.EventID))
	if err != nil {
		return nil, err
	}
	again, err := r.verdicts(ctx, f, events.ReobservedIn(f.Namespace, f.EventID))
	if err != nil {
		return nil, err
	}
	rows := make([]Row, 0, len(outs))
	for _, o := range outs {
		row := Row{Outcome: o}
		if v, ok := verdicts[outcomeKey{o.EventID, o.VM}]; ok {
			row.Verdict = &v
		}
		if v, ok := again[outcomeKey{o.EventID, o.VM}]; ok && row.Verdict != nil {
			row.Reobserved = &v
		}
		if !f.Differs || row.Differs() {
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// verdicts reads the stored verdicts (or re-observations) under subject
// that f selects, the latest by event and VM.
func (r *Reader) verdicts(ctx context.Context, f OutcomeFilter, subject string) (map[outcomeKey]events.Verdict, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
	out := map[outcomeKey]events.Verdict{}
	err := r.scan(ctx, events.StreamOutcomes, cfg, func(m jetstream.Msg) {
		var v events.Verdict
		if _, err := events.Decode(m.Data(), events.TypeVerdict, &v); err != nil || (f.Name != "" && v.VM.Name != f.Name) {
			return
		}
		out[outcomeKey{v.EventID, v.VM}] = v
	})
	return out, err
}

// latestOutcomes scans the outcomes stream under filter and keeps the
// latest attempt per event and VM of the outcomes keep accepts.
func (r *Reader) latestOutcomes(ctx context.Context, filter string, keep func(*events.Outcome) bool) (*latestSet, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}
	latest := &latestSet{byKey: map[outcomeKey]int{}, eventOrder: map[string]int{}}
	err := r.scan(ctx, events.StreamOutcomes, cfg, func(m jetstream.Msg) {
		var o events.Outcome
		// An undecodable message is the applier's dead-letter business,
		// not an outcome; a read-only view skips it.
		if _, err := events.Decode(m.Data(), events.TypeOutcome, &o); err != nil || !keep(&o) {
			return
		}
		latest.add(o)
	})
	return latest, err
}

// outcomeKey identifies one VM in one event; the UID tells a re-created VM
// of the same name apart.
type outcomeKey struct {
	eventID string
	vm      events.VMRef
}

// latestSet keeps the last outcome stored per event and VM; the later
// message wins.
type latestSet struct {
	outs       []events.Outcome
	byKey      map[outcomeKey]int
	eventOrder map[string]int
}

func (l *latestSet) add(o events.Outcome) {
	if _, seen := l.eventOrder[o.EventID]; !seen {
		l.eventOrder[o.EventID] = len(l.eventOrder)
	}
	k := outcomeKey{o.EventID, o.VM}
	i, seen := l.byKey[k]
	// The stream's order decides, not the attempt number: a plan retried
	// from the dead-letter stream starts again at attempt 1, after the
	// failed outcome of its last attempt.
	if !seen {
		l.byKey[k] = len(l.outs)
		l.outs = append(l.outs, o)
		return
	}
	l.outs[i] = o
}

func (l *latestSet) sorted() []events.Outcome {
	outs := slices.Clone(l.outs)
	slices.SortStableFunc(outs, func(a, b events.Outcome) int {
		return cmp.Or(
			cmp.Compare(l.eventOrder[a.EventID], l.eventOrder[b.EventID]),
			cmp.Compare(a.VM.Namespace, b.VM.Namespace),
			cmp.Compare(a.VM.Name, b.VM.Name),
			cmp.Compare(a.VM.UID, b.VM.UID))
	})
	return outs
}

// WriteOutcomes writes rows as a table (f table or wide, cut to width when
// it is not zero): PREDICTED is the outcome's result, OBSERVED KubeVirt's
// verdict (wide adds KubeVirt's condition and message), then a count per
// result and per verdict; or as a list of Row (json, yaml).
func WriteOutcomes(w io.Writer, rows []Row, f printer.Format, width int) error {
	if !f.Human() {
		return printer.WriteData(w, f, printer.NonNil(rows))
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no outcomes found")
		return err
	}
	t := printer.NewTable(
		printer.Column{Name: "EVENT", Fit: true},
		printer.Column{Name: "NAMESPACE"},
		printer.Column{Name: "NAME"},
		printer.Column{Name: "PREDICTED"},
		printer.Column{Name: "OBSERVED"},
		printer.Column{Name: "ATTEMPT"},
		printer.Column{Name: "WROTE"},
		printer.Column{Name: "TRACE", Wide: true},
		printer.Column{Name: "KUBEVIRT", Wide: true, Fit: true},
		printer.Column{Name: "REASON", Fit: true},
	)
	counts, verdicts := map[events.Result]int{}, map[string]int{}
	differ := 0
	for _, row := range rows {
		counts[row.Result]++
		if v := row.Current(); v != nil {
			verdicts[string(v.Observed)]++
		} else if o := row.Observed(); o != "-" {
			verdicts[o]++
		}
		if row.Differs() {
			differ++
		}
		t.Append(row.EventID, row.VM.Namespace, row.VM.Name, string(row.Result), row.Observed(), strconv.Itoa(row.Attempt),
			yesNo(row.Wrote), orDash(row.TraceID), orDash(kubevirtSays(row.Verdict)), orDash(outcomeReason(row.Outcome)))
	}
	if err := t.Write(w, f, width); err != nil {
		return err
	}
	noun := "outcomes"
	if len(rows) == 1 {
		noun = "outcome"
	}
	differs := "differ"
	if differ == 1 {
		differs = "differs"
	}
	_, err := fmt.Fprintf(w, "\n%d %s: %s\nKubeVirt's verdicts: %s; %d %s from kvlive's prediction\n", len(rows), noun, countList(counts, true),
		VerdictList(verdicts), differ, differs)
	return err
}

// VerdictList renders verdict counts in events.Verdicts order, then the
// VMs still awaited ("3 live, 1 restart, 2 awaited"); "none" when empty.
func VerdictList(counts map[string]int) string {
	var parts []string
	for _, v := range slices.Concat(events.Verdicts, []events.Observed{"awaited"}) {
		if n := counts[string(v)]; n > 0 {
			parts = append(parts, strconv.Itoa(n)+" "+string(v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// kubevirtSays is KubeVirt's condition and message behind a verdict, or
// what the verifier saw.
func kubevirtSays(v *events.Verdict) string {
	switch {
	case v == nil:
		return ""
	case v.Condition != "" && v.Message != "":
		return v.Condition + ": " + v.Message
	case v.Message != "":
		return v.Message
	}
	return v.Reason
}

// outcomeReason is the reason, the error, or both ("gave up after 8
// attempts: conflict").
func outcomeReason(o events.Outcome) string {
	switch {
	case o.Error == "":
		return o.Reason
	case o.Reason == "":
		return o.Error
	}
	return o.Reason + ": " + o.Error
}

// countList renders counts in events.Results order ("5 live, 2 restart"),
// zeros included when all is set.
func countList(counts map[events.Result]int, all bool) string {
	parts := make([]string, 0, len(events.Results))
	for _, res := range events.Results {
		if n := counts[res]; n > 0 || all {
			parts = append(parts, strconv.Itoa(n)+" "+string(res))
		}
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
