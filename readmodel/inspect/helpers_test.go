package inspect

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// t0 anchors every fixture in time, so golden files never move.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// fixture publishes kvlive records to a test server the way the stages do.
type fixture struct {
	t  testing.TB
	js jetstream.JetStream
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return &fixture{t: t, js: testenv.JetStream(t)}
}

func (f *fixture) reader() *Reader { return NewReader(f.js) }

func (f *fixture) publish(subject, id, typ string, p events.Payload) {
	f.t.Helper()
	body, err := events.Encode(typ, id, "kvlive/test", "", t0, p)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(context.Background(), events.NewMsg(subject, id, typ, body)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) outcome(o events.Outcome) {
	f.t.Helper()
	f.publish(events.OutcomeSubject(o.VM.Namespace, o.EventID), events.OutcomeID(o.EventID, o.VM.UID, o.Attempt), events.TypeOutcome, &o)
}

func (f *fixture) changed(c events.Changed) string {
	f.t.Helper()
	typ := events.TypeInstancetypeChanged
	if c.Object.IsPreference() {
		typ = events.TypePreferenceChanged
	}
	id := events.EventID(c.Object.Kind, c.UID, c.Generation)
	body, err := events.Encode(typ, id, "kvlive/watcher", c.Object.String(), c.ObservedAt, &c)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(context.Background(), events.NewMsg(events.ChangedSubject(c.Object.Kind), id, typ, body)); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) switched(s events.SwitchRequest) string {
	f.t.Helper()
	id := events.SwitchEventID(s.ID)
	body, err := events.Encode(events.TypeSwitchRequested, id, "kvlive/switch", s.From.String(), s.RequestedAt, &s)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(context.Background(), events.NewMsg(events.SwitchSubject(), id, events.TypeSwitchRequested, body)); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) rollout(r events.Rollout) {
	f.t.Helper()
	ctx := context.Background()
	kv, err := f.js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		f.t.Fatal(err)
	}
	b, err := events.MarshalRollout(r)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := kv.Put(ctx, events.RolloutKey(r.EventID), b); err != nil {
		f.t.Fatal(err)
	}
}

// spans stores spans as the exporter does: on their own trace's subject and
// on the subject of every other trace they link to.
func (f *fixture) spans(spans ...events.Span) {
	f.t.Helper()
	ctx := context.Background()
	for _, s := range spans {
		b, err := events.MarshalSpan(s)
		if err != nil {
			f.t.Fatal(err)
		}
		subjects := map[string]bool{events.SpanSubject(s.TraceID): true}
		for _, l := range s.Links {
			subjects[events.SpanSubject(l.TraceID)] = true
		}
		for subj := range subjects {
			if _, err := f.js.Publish(ctx, subj, b); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
