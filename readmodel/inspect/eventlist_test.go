package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

// seedEvents records an instance type edit (planned, outcomes in), a
// preference edit (not planned yet) and a switch (planned, nothing reached).
func seedEvents(f *fixture) (edit, pref, sw string) {
	u1 := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}
	edit = f.changed(events.Changed{Object: u1, UID: "6f1c2a", Generation: 2, OldGeneration: 1, NewSpec: []byte(`{}`), ObservedAt: t0})
	pref = f.changed(events.Changed{Object: events.Ref{Kind: events.KindPreference, Namespace: "shop", Name: "fast"}, UID: "9a9a", Generation: 4,
		NewSpec: []byte(`{}`), ObservedAt: ms(60_000)})
	sw = f.switched(events.SwitchRequest{ID: "0b5c77", From: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"},
		To: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, RequestedAt: ms(120_000)})
	f.rollout(events.Rollout{EventID: edit, Object: u1, Planned: 3, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
		Counts: map[events.Result]int{events.ResultLive: 1, events.ResultRestart: 1, events.ResultNextBoot: 1}})
	f.rollout(events.Rollout{EventID: sw, Planned: 0, Counts: map[events.Result]int{}})
	for _, o := range []events.Outcome{
		{EventID: edit, VM: vm("shop", "web-1"), Result: events.ResultLive, Attempt: 1},
		{EventID: edit, VM: vm("shop", "db-1"), Result: events.ResultFailed, Attempt: 1, Error: "conflict"},
		{EventID: edit, VM: vm("shop", "db-1"), Result: events.ResultRestart, Attempt: 2},
		{EventID: "some/older/event", VM: vm("shop", "db-1"), Result: events.ResultLive, Attempt: 1},
	} {
		if o.Result.Moves() {
			o.VerdictDeadline = 2 * time.Minute
		}
		f.outcome(o)
	}
	return edit, pref, sw
}

func TestEvents(t *testing.T) {
	f := newFixture(t)
	edit, pref, sw := seedEvents(f)
	list, err := f.reader().Events(context.Background(), 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].ID != edit || list[1].ID != pref || list[2].ID != sw {
		t.Fatalf("events %+v, want edit, preference, switch (newest last)", list)
	}
	e := list[0]
	if e.Type != EventInstancetypeChange || e.Object != "clusterinstancetype/u1.medium" || e.Generation != 2 || e.OldGeneration != 1 ||
		e.Planned == nil || *e.Planned != 3 || e.TraceID == "" {
		t.Errorf("edit: %+v", e)
	}
	if want := map[events.Result]int{events.ResultLive: 1, events.ResultRestart: 1}; !equalCounts(e.Outcomes, want) {
		t.Errorf("edit outcomes %v, want %v (latest attempt per VM)", e.Outcomes, want)
	}
	if p := list[1]; p.Type != EventPreferenceChange || p.Object != "preference/shop/fast" || p.Planned != nil || len(p.Outcomes) != 0 {
		t.Errorf("preference: %+v", p)
	}
	if s := list[2]; s.Type != EventSwitch || s.Object != "clusterinstancetype/u1.small → clusterinstancetype/u1.large" ||
		s.Planned == nil || *s.Planned != 0 {
		t.Errorf("switch: %+v", s)
	}

	list, err = f.reader().Events(context.Background(), 2)
	if err != nil || len(list) != 2 || list[0].ID != pref || list[1].ID != sw {
		t.Errorf("--limit 2: %+v, %v; want the two newest", list, err)
	}
}

func equalCounts(a, b map[events.Result]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestEventsOutput(t *testing.T) {
	f := newFixture(t)
	seedEvents(f)
	list, err := f.reader().Events(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	at := list[len(list)-1].Time.Add(90 * time.Minute)
	var buf bytes.Buffer
	if err := (Listing{Format: printer.FormatTable, Now: at}).WriteEvents(&buf, list); err != nil {
		t.Fatal(err)
	}
	golden(t, "events.table.golden", buf.Bytes())

	buf.Reset()
	if err := (Listing{Format: printer.FormatTable, Width: 80, Now: at}).WriteEvents(&buf, list); err != nil {
		t.Fatal(err)
	}
	golden(t, "events.table80.golden", buf.Bytes())

	buf.Reset()
	if err := (Listing{Format: printer.FormatWide, Width: 80, Now: at}).WriteEvents(&buf, list); err != nil {
		t.Fatal(err)
	}
	golden(t, "events.wide.golden", buf.Bytes())

	buf.Reset()
	if err := (Listing{Format: printer.FormatTable, Now: at}).WriteRollouts(&buf, list); err != nil {
		t.Fatal(err)
	}
	golden(t, "rollouts.table.golden", buf.Bytes())

	buf.Reset()
	if err := (Listing{Format: printer.FormatJSON}).WriteEvents(&buf, list); err != nil {
		t.Fatal(err)
	}
	var decoded []EventSummary
	if err := json.Unmarshal(buf.Bytes(), &decoded); err != nil || len(decoded) != 3 {
		t.Fatalf("json: %v, %d events", err, len(decoded))
	}
	if !strings.Contains(buf.String(), `"planned": null`) {
		t.Error(`json: an unplanned event should say "planned": null`)
	}
}

func TestEventsEmpty(t *testing.T) {
	f := newFixture(t)
	list, err := f.reader().Events(context.Background(), 20)
	if err != nil || len(list) != 0 {
		t.Fatalf("%v, %v", list, err)
	}
	var buf bytes.Buffer
	if err := (Listing{Format: printer.FormatJSON}).WriteEvents(&buf, list); err != nil || strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("json %q, %v", buf.String(), err)
	}
}

// TestAnEventThePlannerRefusedIsShownAsSuch: a switch request the planner
// dead-lettered (here, a forged one) is never planned; kvlive events says
// so with the planner's reason, not "not yet".
func TestAnEventThePlannerRefusedIsShownAsSuch(t *testing.T) {
	f := newFixture(t)
	sw := events.SwitchRequest{ID: "forged", From: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"},
		To: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, RequestedAt: ms(1000)}
	id := f.switched(sw)
	body, err := events.Encode(events.TypeSwitchRequested, id, "kvlive/switch", sw.From.String(), sw.RequestedAt, &sw)
	if err != nil {
		t.Fatal(err)
	}
	dead := nats.NewMsg(events.DeadLetterSubject("planner", events.SwitchSubject()))
	dead.Data = body
	dead.Header.Set(events.HeaderDeadReason, "the switch request names no namespace it may plan in")
	if _, err := f.js.PublishMsg(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	list, err := f.reader().Events(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].DeadLetter != "the switch request names no namespace it may plan in" {
		t.Fatalf("events: %+v", list)
	}
	var out bytes.Buffer
	if err := (Listing{Format: printer.FormatWide, Width: 200, Now: time.Now()}).WriteEvents(&out, list); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "dead-lettered") || strings.Contains(out.String(), "not yet") {
		t.Errorf("kvlive events -o wide:\n%s", out.String())
	}
	out.Reset()
	if err := (Listing{Format: printer.FormatTable, Width: 200, Now: time.Now()}).WriteEvents(&out, list); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "pending") {
		t.Errorf("kvlive events: want it never pending:\n%s", out.String())
	}

	out.Reset()
	if err := (Listing{Format: printer.FormatTable, Width: 200, Now: time.Now()}).WriteRollouts(&out, list); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "refused") || strings.Contains(out.String(), "pending") {
		t.Errorf("kvlive rollouts: want the state refused, never pending:\n%s", out.String())
	}

	// rollout status says so too, and a watch of it is done; also when an
	// operator paused it ahead before the planner refused it.
	store, err := rollout.Open(context.Background(), f.js)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Apply(context.Background(), id, events.ActionPause, "checking", "ops", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	a, err := f.reader().Status(context.Background(), id)
	if err != nil || a.Phase != rollout.PhaseRefused || !a.Done() || a.Refused != "the switch request names no namespace it may plan in" {
		t.Fatalf("status of the refused event: %+v, %v; want refused with the reason, done", a, err)
	}
	out.Reset()
	if err := WriteStatus(&out, a, printer.FormatTable); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "refused (dead-lettered by the planner: the switch request names no namespace") ||
		!strings.Contains(s, "planned:      never") || strings.Contains(s, "pending") {
		t.Errorf("rollout status of the refused event:\n%s", s)
	}
}

// TestEventsListUndos: an undo request is listed as an undo of the
// rollout it undoes, by that rollout's short id.
func TestEventsListUndos(t *testing.T) {
	f := newFixture(t)
	edit, _, _ := seedEvents(f)
	u := events.UndoRequest{ID: "5e0c9d1a-0000-4000-8000-000000000001", Of: edit, RequestedAt: ms(180_000)}
	id := events.UndoEventID(u.ID)
	body, err := events.Encode(events.TypeUndoRequested, id, "kvlive/undo", "", u.RequestedAt, &u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(context.Background(), events.NewMsg(events.UndoSubject(), id, events.TypeUndoRequested, body)); err != nil {
		t.Fatal(err)
	}
	list, err := f.reader().Events(context.Background(), 1)
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Type != EventUndo || list[0].Object != "undo of "+events.ShortEventID(edit) {
		t.Errorf("events: %+v, %v; want the undo of %s", list, err, edit)
	}
}
