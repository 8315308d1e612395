package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

const (
	testEvent = "switch/0b5c77"
	testTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// recordedStore leaves a JetStream store behind as kvlive demo --data-dir
// does: a switch, its rollout record, one outcome and its trace's spans.
func recordedStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	js, closeStore := openStore(t, dir)
	defer closeStore()
	ctx := t.Context()
	if err := events.Setup(ctx, js, events.DefaultStreamOptions(), nil); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	req := events.SwitchRequest{ID: "0b5c77", From: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"},
		To: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, RequestedAt: at}
	out := events.Outcome{EventID: testEvent, VM: events.VMRef{Namespace: "shop", Name: "web-1", UID: "u1"}, Result: events.ResultLive,
		Wrote: true, Attempt: 1, TraceID: testTrace, FinishedAt: at}
	publish(t, js, events.SwitchSubject(), testEvent, events.TypeSwitchRequested, &req)
	publish(t, js, events.OutcomeSubject("shop", testEvent), events.OutcomeID(testEvent, "u1", 1), events.TypeOutcome, &out)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: testEvent, Planned: 1, TraceID: testTrace, Counts: map[events.Result]int{events.ResultLive: 1}})
	if _, err := kv.Put(ctx, events.RolloutKey(testEvent), rec); err != nil {
		t.Fatal(err)
	}
	for _, s := range []events.Span{
		{TraceID: testTrace, SpanID: "00f067aa0ba902b7", Name: "planner.plan", Start: at, End: at.Add(20 * time.Millisecond)},
		{TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", Name: "applier.apply shop/web-1",
			Start: at.Add(20 * time.Millisecond), End: at.Add(80 * time.Millisecond), Attributes: map[string]any{"kvlive.result": "live"},
			Links: []events.SpanLink{{TraceID: testTrace, SpanID: "00f067aa0ba902b7"}}},
	} {
		b, _ := events.MarshalSpan(s)
		if _, err := js.Publish(ctx, events.SpanSubject(testTrace), b); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// openStore starts an in-process JetStream server on dir, as --data-dir
// does, and returns a client and a func that closes both.
func openStore(t *testing.T, dir string) (jetstream.JetStream, func()) {
	t.Helper()
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := bus.ConnectEmbedded(ns, t.Name(), nil)
	if err != nil {
		ns.Shutdown()
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown() }
}

func publish(t *testing.T, js jetstream.JetStream, subject, id, typ string, p events.Payload) {
	t.Helper()
	body, err := events.Encode(typ, id, "kvlive/test", "", time.Now(), p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), events.NewMsg(subject, id, typ, body)); err != nil {
		t.Fatal(err)
	}
}

func kvlive(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

func TestInspectCommandsOnDataDir(t *testing.T) {
	dir := recordedStore(t)
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"events"}, []string{testEvent, "clusterinstancetype/u1.small → clusterinstancetype/u1.large", "1 (1 live)"}},
		{[]string{"outcomes", "--vm", "shop/web-1", "-o", "wide"}, []string{testEvent, "web-1", "live", testTrace, "1 outcome: 1 live"}},
		{[]string{"outcomes", "--result", "failed"}, []string{"no outcomes found"}},
		{[]string{"trace", testEvent, "--color", "never"}, []string{"trace " + testTrace + " · 2 spans", "↪ applier.apply shop/web-1", "│  live"}},
		{[]string{"trace", testTrace, "--color", "always"}, []string{"\x1b[32mlive\x1b[0m"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := kvlive(t, append(tt.args, "--data-dir", dir)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}

	t.Run("NO_COLOR", func(t *testing.T) {
		t.Setenv("NO_COLOR", "1")
		out, err := kvlive(t, "trace", testEvent, "--data-dir", dir)
		if err != nil || strings.Contains(out, "\x1b") {
			t.Errorf("escape codes with NO_COLOR (or %v):\n%q", err, out)
		}
	})
	t.Run("trace -o json", func(t *testing.T) {
		out, err := kvlive(t, "trace", testEvent, "-o", "json", "--data-dir", dir)
		var spans []events.Span
		if err != nil || json.Unmarshal([]byte(out), &spans) != nil || len(spans) != 2 || spans[0].Name != "planner.plan" {
			t.Errorf("%v\n%s", err, out)
		}
	})
}

func TestInspectCommandErrors(t *testing.T) {
	dir := recordedStore(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"trace", "switch/unknown", "--data-dir", dir}, "no rollout recorded for event switch/unknown"},
		{[]string{"trace", "5bf92f3577b34da6a3ce929d0e0e4736", "--data-dir", dir}, "no spans stored for trace 5bf92f3577b34da6a3ce929d0e0e4736"},
		{[]string{"outcomes", "--vm", "web-1", "--data-dir", dir}, "want NAMESPACE/NAME"},
		{[]string{"outcomes", "--result", "great", "--data-dir", dir}, "--result"},
		{[]string{"events", "-o", "tsv", "--data-dir", dir}, "want table, wide, json or yaml"},
		{[]string{"trace", testEvent, "--color", "sometimes", "--data-dir", dir}, "--color"},
		{[]string{"events", "--data-dir", dir, "--nats-url", "nats://127.0.0.1:1"}, "none of the others can be"},
		{[]string{"events", "--data-dir", t.TempDir()}, "holds no JetStream store"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := kvlive(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q\n%s", err, tt.want, out)
			}
		})
	}
}

// TestShellCompletion: cobra's completion offers event ids from the store
// (positional and --event), -o values and instance type kinds.
func TestShellCompletion(t *testing.T) {
	dir := recordedStore(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "trace", "--data-dir", dir, "sw"}, testEvent},
		{[]string{"__complete", "rollout", "status", "--data-dir", dir, ""}, testEvent},
		{[]string{"__complete", "outcomes", "--data-dir", dir, "--event", "switch/"}, testEvent},
		{[]string{"__complete", "events", "-o", ""}, "wide"},
		{[]string{"__complete", "plan", "cluster"}, "clusterinstancetype/"},
		{[]string{"__complete", "switch", "--to", "clusterp"}, "clusterpreference/"},
	} {
		out, err := kvlive(t, tt.args...)
		if err != nil || !slices.Contains(strings.Split(out, "\n"), tt.want) {
			t.Errorf("kvlive %s: %v, want %q among\n%s", strings.Join(tt.args, " "), err, tt.want, out)
		}
	}
	out, _ := kvlive(t, "__complete", "trace", "--data-dir", dir, "nothing-like-it")
	if strings.Contains(out, testEvent) {
		t.Errorf("an id that does not match the typed prefix was offered:\n%s", out)
	}
}
