package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

const (
	editID   = "VirtualMachineClusterInstancetype/6f1c2a/2"
	switchID = "switch/0b5c77"
)

func vm(ns, name string) events.VMRef {
	return events.VMRef{Namespace: ns, Name: name, UID: "uid-" + name}
}

// seedOutcomes records two events' outcomes, with retries and attempts
// stored out of order.
func seedOutcomes(f *fixture) {
	trace := "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, o := range []events.Outcome{
		{EventID: editID, VM: vm("shop", "web-1"), Result: events.ResultLive, Wrote: true, Attempt: 1, TraceID: trace, Reason: "sockets and memory hot-plugged"},
		// db-1 failed for good, then `kvlive dlq retry` sent its plan again,
		// which starts over at attempt 1: the later record wins.
		{EventID: editID, VM: vm("shop", "db-1"), Result: events.ResultFailed, Attempt: 8, Reason: "gave up after 8 attempts", Error: "conflict"},
		{EventID: editID, VM: vm("shop", "db-1"), Result: events.ResultRestart, Wrote: true, Attempt: 1, TraceID: trace, Reason: "cpu.model changed"},
		{EventID: editID, VM: vm("batch", "job-7"), Result: events.ResultNextBoot, Wrote: true, Attempt: 1, TraceID: trace},
		{EventID: switchID, VM: vm("shop", "web-1"), Result: events.ResultSkip, Attempt: 1, Reason: "superseded"},
		{EventID: switchID, VM: vm("batch", "job-8"), Result: events.ResultFailed, Attempt: 8, Reason: "gave up after 8 attempts", Error: "the server is currently unable to handle the request"},
	} {
		o.FinishedAt = t0
		if o.Result.Moves() {
			o.VerdictDeadline = 2 * time.Minute
		}
		f.outcome(o)
	}
	// A body the applier's decoder would reject is not an outcome.
	if _, err := f.js.Publish(context.Background(), events.OutcomeSubject("shop", "ev"), []byte(`{"not":"an envelope"}`)); err != nil {
		f.t.Fatal(err)
	}
}

// seedVerdicts stores KubeVirt's verdicts on two of the VMs the edit moved:
// web-1 went live as predicted; db-1, predicted to need a restart, was
// hot-plugged. job-7's verdict is still awaited.
func seedVerdicts(f *fixture) {
	for _, v := range []events.Verdict{
		{EventID: editID, VM: vm("shop", "web-1"), Predicted: events.ResultLive, Observed: events.ObservedLive, Reason: "the VMI runs the new sockets and memory"},
		{EventID: editID, VM: vm("shop", "db-1"), Predicted: events.ResultRestart, Observed: events.ObservedLive, Reason: "the VMI runs the new sockets and memory"},
	} {
		v.MovedAt, v.ObservedAt = t0, t0
		id := events.VerdictID(v.EventID, v.VM.UID)
		body, err := events.Encode(events.TypeVerdict, id, "test", "", t0, &v)
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := f.js.PublishMsg(context.Background(), events.NewMsg(events.VerdictSubject(v.VM.Namespace, v.VM.UID, v.EventID), id, events.TypeVerdict, body)); err != nil {
			f.t.Fatal(err)
		}
	}
}

// TestOutcomeRowsJoinVerdicts: each VM's verdict stands next to its
// prediction; --differs keeps the VMs where they differ.
func TestOutcomeRowsJoinVerdicts(t *testing.T) {
	f := newFixture(t)
	seedOutcomes(f)
	seedVerdicts(f)
	rows, err := f.reader().OutcomeRows(context.Background(), OutcomeFilter{EventID: editID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.VM.Name+" "+string(r.Result)+" "+r.Observed())
	}
	if want := "job-7 next-boot awaited, db-1 restart live, web-1 live live"; strings.Join(got, ", ") != want {
		t.Errorf("got %s, want %s", strings.Join(got, ", "), want)
	}
	rows, err = f.reader().OutcomeRows(context.Background(), OutcomeFilter{Differs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].VM.Name != "db-1" || !rows[0].Differs() {
		t.Errorf("differs: %+v, want db-1 alone", rows)
	}
}

// TestOutcomeRowsShowReobservations: a VM not observed at the deadline
// and seen at its next boot since shows both, the verdict first.
func TestOutcomeRowsShowReobservations(t *testing.T) {
	f := newFixture(t)
	seedOutcomes(f)
	for _, v := range []events.Verdict{
		{EventID: editID, VM: vm("batch", "job-7"), Predicted: events.ResultNextBoot, Observed: events.ObservedNotObserved, Reason: "at the deadline"},
		{EventID: editID, VM: vm("batch", "job-7"), Predicted: events.ResultNextBoot, Observed: events.ObservedNextBoot, Reason: "later", Reobserved: true},
	} {
		v.MovedAt, v.ObservedAt = t0, t0
		subject, id := events.VerdictSubject(v.VM.Namespace, v.VM.UID, v.EventID), events.VerdictID(v.EventID, v.VM.UID)
		if v.Reobserved {
			subject, id = events.ReobservedSubject(v.VM.Namespace, v.VM.UID, v.EventID), id+"/again"
		}
		body, err := events.Encode(events.TypeVerdict, id, "test", "", t0, &v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.js.PublishMsg(context.Background(), events.NewMsg(subject, id, events.TypeVerdict, body)); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := f.reader().OutcomeRows(context.Background(), OutcomeFilter{EventID: editID, Namespace: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Observed() != "not-observed→next-boot" || rows[0].Reobserved == nil || rows[0].Differs() || rows[0].Current().Observed != events.ObservedNextBoot {
		t.Fatalf("rows %+v: want job-7 not-observed→next-boot, its re-observation current and as predicted (the verdict at the deadline kept as history)", rows)
	}
}

func TestOutcomesFilters(t *testing.T) {
	f := newFixture(t)
	seedOutcomes(f)
	tests := []struct {
		name   string
		filter OutcomeFilter
		want   []string
	}{
		{"all, latest attempt each", OutcomeFilter{}, []string{
			editID + " batch/job-7 next-boot 1", editID + " shop/db-1 restart 1", editID + " shop/web-1 live 1",
			switchID + " batch/job-8 failed 8", switchID + " shop/web-1 skip 1"}},
		{"one event", OutcomeFilter{EventID: switchID}, []string{switchID + " batch/job-8 failed 8", switchID + " shop/web-1 skip 1"}},
		{"one VM", OutcomeFilter{Namespace: "shop", Name: "web-1"}, []string{editID + " shop/web-1 live 1", switchID + " shop/web-1 skip 1"}},
		{"one namespace", OutcomeFilter{Namespace: "batch"}, []string{editID + " batch/job-7 next-boot 1", switchID + " batch/job-8 failed 8"}},
		// db-1 failed, but its retried plan then restarted it.
		{"result of the latest attempt", OutcomeFilter{Result: events.ResultFailed}, []string{switchID + " batch/job-8 failed 8"}},
		{"event and VM", OutcomeFilter{EventID: editID, Namespace: "shop", Name: "db-1"}, []string{editID + " shop/db-1 restart 1"}},
		{"nothing", OutcomeFilter{Namespace: "nowhere"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs, err := f.reader().Outcomes(context.Background(), tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range outs {
				got = append(got, strings.Join([]string{o.EventID, o.VM.String(), string(o.Result), strconv.Itoa(o.Attempt)}, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestOutcomesTableGolden(t *testing.T) {
	f := newFixture(t)
	seedOutcomes(f)
	seedVerdicts(f)
	rows, err := f.reader().OutcomeRows(context.Background(), OutcomeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteOutcomes(&buf, rows, printer.FormatTable, 0); err != nil {
		t.Fatal(err)
	}
	golden(t, "outcomes.table.golden", buf.Bytes())
}

func TestOutcomesJSON(t *testing.T) {
	f := newFixture(t)
	seedOutcomes(f)
	seedVerdicts(f)
	rows, err := f.reader().OutcomeRows(context.Background(), OutcomeFilter{EventID: editID, Namespace: "shop", Name: "db-1"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteOutcomes(&buf, rows, printer.FormatJSON, 0); err != nil {
		t.Fatal(err)
	}
	var got []Row
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Attempt != 1 || got[0].Result != events.ResultRestart || !got[0].Wrote ||
		got[0].Verdict == nil || got[0].Verdict.Observed != events.ObservedLive {
		t.Errorf("got %+v", got)
	}
	buf.Reset()
	if err := WriteOutcomes(&buf, nil, printer.FormatJSON, 0); err != nil || strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("no outcomes: %q, %v; want []", buf.String(), err)
	}
	buf.Reset()
	if err := WriteOutcomes(&buf, nil, printer.FormatYAML, 0); err != nil || buf.String() != "[]\n" {
		t.Errorf("no outcomes as yaml: %q, %v; want []", buf.String(), err)
	}
}

func TestOutcomesWithoutStream(t *testing.T) {
	f := newFixture(t)
	if err := f.js.DeleteStream(context.Background(), events.StreamOutcomes); err != nil {
		t.Fatal(err)
	}
	_, err := f.reader().Outcomes(context.Background(), OutcomeFilter{})
	if err == nil || !strings.Contains(err.Error(), "KVLIVE_OUTCOMES not found") {
		t.Errorf("err = %v, want the stream named as not found", err)
	}
}

// TestFindOutcomes: an event is named by its id or a prefix of it; an event
// kvlive never heard of is an error, not an empty list; an event planned
// with no outcome yet is an empty list.
func TestFindOutcomes(t *testing.T) {
	f := newFixture(t)
	seedOutcomes(f)
	f.rollout(events.Rollout{EventID: editID, Planned: 3, PlannedAt: t0})
	const planned = "switch/planned-nothing-yet"
	f.rollout(events.Rollout{EventID: planned, Planned: 1, PlannedAt: t0})
	r := f.reader()
	outs, err := r.FindOutcomes(t.Context(), OutcomeFilter{EventID: editID[:12]})
	if err != nil || len(outs) != 3 || outs[0].EventID != editID {
		t.Errorf("outcomes by a prefix of %s: %d, %v; want its 3", editID, len(outs), err)
	}
	if _, err := r.FindOutcomes(t.Context(), OutcomeFilter{EventID: "switch/no-such-event"}); !errors.Is(err, rollout.ErrNoRollout) {
		t.Errorf("outcomes of an unknown event: %v, want ErrNoRollout", err)
	}
	if outs, err := r.FindOutcomes(t.Context(), OutcomeFilter{EventID: planned}); err != nil || len(outs) != 0 {
		t.Errorf("outcomes of an event planned with none yet: %v, %v; want none", outs, err)
	}
	if outs, err := r.FindOutcomes(t.Context(), OutcomeFilter{Namespace: "batch"}); err != nil || len(outs) != 2 {
		t.Errorf("outcomes of a namespace: %d, %v; want 2", len(outs), err)
	}
}
