package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"kvlive/events"
	"kvlive/internal/printer"
)

const rolloutTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// vmTrace is the trace a per-VM apply span roots, linked to the plan span.
func vmTrace(i int) string { return fmt.Sprintf("%032x", 0xa0000+i) }

func spanID(i int) string { return fmt.Sprintf("%016x", i) }

// rolloutSpans is one edit's trace: the watcher's span, the planner's under
// it, and per VM an apply span that roots its own trace and links to the
// plan span (one with a child of its own), plus a stray span.
func rolloutSpans() []events.Span {
	planLink := []events.SpanLink{{TraceID: rolloutTrace, SpanID: spanID(2)}}
	apply := func(i int, name string, start, end int, attrs map[string]any) events.Span {
		return events.Span{TraceID: vmTrace(i), SpanID: spanID(10 + i), Name: "applier.apply " + name, Kind: "consumer",
			Start: ms(start), End: ms(end), Attributes: attrs, Links: planLink, StatusCode: "unset",
			Events: []events.SpanEvent{{Name: "pin moved", Time: ms(start + 12)}}}
	}
	failed := apply(4, "shop/db-2", 45, 95, map[string]any{"kvlive.result": "failed", "kvlive.plan.action": "live"})
	failed.StatusCode, failed.StatusMessage, failed.Events = "error", "conflict", nil
	return []events.Span{
		{TraceID: rolloutTrace, SpanID: spanID(1), Name: "watcher.observe clusterinstancetype/u1.medium", Kind: "internal",
			Start: t0, End: ms(3), StatusCode: "unset"},
		{TraceID: rolloutTrace, SpanID: spanID(2), ParentSpanID: spanID(1), Name: "planner.plan clusterinstancetype/u1.medium", Kind: "consumer",
			Start: ms(5), End: ms(40), StatusCode: "ok",
			Attributes: map[string]any{"kvlive.plans.live": 2.0},
			Events:     []events.SpanEvent{{Name: "plans published", Time: ms(38)}}},
		apply(2, "shop/web-2", 42, 60, map[string]any{"kvlive.result": "restart"}),
		apply(1, "shop/web-1", 41, 100, map[string]any{"kvlive.result": "live"}),
		apply(3, "batch/job-7", 43, 50, map[string]any{"kvlive.result": "next-boot"}),
		failed,
		apply(5, "shop/old-1", 44, 46, map[string]any{"kvlive.plan.action": "skip"}),
		{TraceID: vmTrace(1), SpanID: spanID(30), ParentSpanID: spanID(11), Name: "kube.patch shop/web-1", Kind: "client",
			Start: ms(50), End: ms(70), StatusCode: "unset"},
		{TraceID: rolloutTrace, SpanID: spanID(40), ParentSpanID: "ffffffffffffffff", Name: "nats.publish kvlive.outcomes.shop", Kind: "producer",
			Start: ms(99), End: ms(100), StatusCode: "unset"},
	}
}

func TestTreeOrder(t *testing.T) {
	tree := NewTree(rolloutTrace, append(rolloutSpans(), rolloutSpans()[2])) // a duplicate span id
	var got []string
	tree.Walk(func(n *Node, depth int) bool {
		mark := ""
		if n.Linked {
			mark = "↪"
		}
		got = append(got, fmt.Sprintf("%d%s %s", depth, mark, n.Span.Name))
		return true
	})
	want := []string{
		"0 watcher.observe clusterinstancetype/u1.medium",
		"1 planner.plan clusterinstancetype/u1.medium",
		"2↪ applier.apply shop/web-1",
		"3 kube.patch shop/web-1",
		"2↪ applier.apply shop/web-2",
		"2↪ applier.apply batch/job-7",
		"2↪ applier.apply shop/old-1",
		"2↪ applier.apply shop/db-2",
		"0 nats.publish kvlive.outcomes.shop",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree order:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if tree.Len() != 9 || len(tree.Spans()) != 9 {
		t.Errorf("Len %d, Spans %d; want 9 (duplicates dropped)", tree.Len(), len(tree.Spans()))
	}
}

func TestTreeBreaksLinkCycles(t *testing.T) {
	a := events.Span{TraceID: "a", SpanID: "1", Name: "a", Start: ms(1), Links: []events.SpanLink{{SpanID: "2"}}}
	b := events.Span{TraceID: "b", SpanID: "2", Name: "b", Start: ms(2), Links: []events.SpanLink{{SpanID: "1"}}}
	self := events.Span{TraceID: "c", SpanID: "3", ParentSpanID: "3", Name: "self", Start: ms(3)}
	tree := NewTree("a", []events.Span{b, a, self})
	if got := len(tree.Spans()); got != 3 {
		t.Fatalf("%d spans drawn, want every span once", got)
	}
	if len(tree.Roots) != 2 || tree.Roots[0].Span.Name != "a" || tree.Roots[0].Children[0].Span.Name != "b" {
		t.Errorf("roots %+v", tree.Roots)
	}
}

func TestWaterfallGolden(t *testing.T) {
	tree := NewTree(rolloutTrace, rolloutSpans())
	var buf bytes.Buffer
	if err := tree.Render(&buf, WaterfallOptions{}); err != nil {
		t.Fatal(err)
	}
	golden(t, "trace.waterfall.golden", buf.Bytes())

	buf.Reset()
	if err := tree.Render(&buf, WaterfallOptions{MaxDepth: 2}); err != nil {
		t.Fatal(err)
	}
	golden(t, "trace.depth2.golden", buf.Bytes())
}

func TestWaterfallFitsTheTerminal(t *testing.T) {
	tree := NewTree(rolloutTrace, rolloutSpans())
	for _, width := range []int{60, 80, 100} {
		var buf bytes.Buffer
		if err := tree.Render(&buf, WaterfallOptions{Width: width}); err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(buf.String()) {
			if n := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); n > width {
				t.Errorf("width %d: a line of %d: %q", width, n, line)
			}
		}
	}
	var whole bytes.Buffer
	if err := tree.Render(&whole, WaterfallOptions{Width: 60, Whole: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(whole.String(), "…") {
		t.Errorf("wide cut a name:\n%s", whole.String())
	}
}

func TestWaterfallColour(t *testing.T) {
	tree := NewTree(rolloutTrace, rolloutSpans())
	var plain, painted bytes.Buffer
	if err := tree.Render(&plain, WaterfallOptions{Color: false}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b") {
		t.Error("colour off, yet escape codes were written")
	}
	if err := tree.Render(&painted, WaterfallOptions{Color: true}); err != nil {
		t.Fatal(err)
	}
	for result, code := range map[string]string{"live": ansiGreen, "restart": ansiYellow, "next-boot": ansiBlue, "skip": ansiDim, "failed: conflict": ansiRed} {
		if !strings.Contains(painted.String(), code+result+ansiReset) {
			t.Errorf("%s is not painted %q", result, code)
		}
	}
}

func TestUseColor(t *testing.T) {
	tests := []struct {
		mode     string
		terminal bool
		noColor  string
		want     bool
	}{
		{ColorAuto, true, "", true},
		{ColorAuto, true, "1", false},
		{ColorAuto, true, "no", false}, // any value counts
		{ColorAuto, false, "", false},
		{ColorAlways, false, "1", true}, // the flag overrides NO_COLOR
		{ColorNever, true, "", false},
	}
	for _, tt := range tests {
		got, err := UseColor(tt.mode, tt.terminal, tt.noColor)
		if err != nil || got != tt.want {
			t.Errorf("UseColor(%q, terminal=%v, NO_COLOR=%q) = %v, %v; want %v", tt.mode, tt.terminal, tt.noColor, got, err, tt.want)
		}
	}
	if _, err := UseColor("sometimes", true, ""); err == nil {
		t.Error("an unknown mode should be an error")
	}
}

func TestReadTrace(t *testing.T) {
	f := newFixture(t)
	spans := rolloutSpans()
	f.spans(spans...)
	f.spans(spans[1]) // the exporter retried: a span stored twice
	f.spans(events.Span{TraceID: "5" + rolloutTrace[1:], SpanID: spanID(99), Name: "another trace", Start: t0, End: t0})
	f.rollout(events.Rollout{EventID: editID, Planned: 5, TraceID: rolloutTrace, SpanID: spanID(2)})
	ctx := context.Background()
	r := f.reader()

	for _, arg := range []string{editID, rolloutTrace, strings.ToUpper(rolloutTrace)} {
		id, err := r.ResolveTrace(ctx, arg)
		if err != nil || id != rolloutTrace {
			t.Errorf("ResolveTrace(%q) = %q, %v; want %s", arg, id, err, rolloutTrace)
		}
	}
	got, err := r.Spans(ctx, rolloutTrace)
	if err != nil {
		t.Fatal(err)
	}
	// The VM's child span lives only in the VM's trace: it does not link here.
	if len(got) != len(spans)-1 {
		t.Errorf("%d spans, want %d: each stored span once, linked ones included", len(got), len(spans)-1)
	}
	var buf bytes.Buffer
	if err := NewTree(rolloutTrace, got).WriteData(&buf, printer.FormatJSON); err != nil {
		t.Fatal(err)
	}
	var decoded []events.Span
	if err := json.Unmarshal(buf.Bytes(), &decoded); err != nil || decoded[0].SpanID != spanID(1) || decoded[2].SpanID != spanID(11) {
		t.Errorf("json in tree order: %v, %+v", err, decoded)
	}
}

func TestTraceNotFound(t *testing.T) {
	f := newFixture(t)
	f.rollout(events.Rollout{EventID: switchID})
	ctx := context.Background()
	r := f.reader()
	for arg, want := range map[string]string{
		"switch/nope": "no rollout recorded for event switch/nope",
		"not a key!":  "no rollout recorded for event not a key!",
		switchID:      "recorded no trace",
	} {
		if _, err := r.ResolveTrace(ctx, arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ResolveTrace(%q) = %v, want %q", arg, err, want)
		}
	}
	if _, err := r.Spans(ctx, rolloutTrace); err == nil || !strings.Contains(err.Error(), "no spans stored for trace "+rolloutTrace) {
		t.Errorf("Spans = %v", err)
	}
}

// TestReadLargeTrace reads more spans than one pull batch holds.
func TestReadLargeTrace(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const n = 3*1024 + 7 // more than three of bus.Scan's pull batches
	for i := range n {
		s := events.Span{TraceID: vmTrace(i), SpanID: spanID(100 + i), Name: "applier.apply", Start: ms(i), End: ms(i + 5),
			Links: []events.SpanLink{{TraceID: rolloutTrace, SpanID: spanID(2)}}}
		b, _ := events.MarshalSpan(s)
		if _, err := f.js.PublishAsync(events.SpanSubject(rolloutTrace), b); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.js.PublishAsyncComplete():
	case <-ctx.Done():
	}
	spans, err := f.reader().Spans(ctx, rolloutTrace)
	if err != nil || len(spans) != n {
		t.Fatalf("%d spans, %v; want %d", len(spans), err, n)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		500:                      "500ns",
		850 * time.Microsecond:   "850µs",
		12300 * time.Microsecond: "12.3ms",
		12 * time.Millisecond:    "12ms",
		1250 * time.Millisecond:  "1.25s",
		-3 * time.Millisecond:    "-3ms",
		90 * time.Second:         "1m30s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// BenchmarkRender draws a 10,000-VM rollout's trace.
func BenchmarkRender(b *testing.B) {
	spans := rolloutSpans()[:2]
	for i := range 10_000 {
		spans = append(spans, events.Span{TraceID: vmTrace(i), SpanID: spanID(100 + i), Name: fmt.Sprintf("applier.apply ns-%d/vm-%d", i%10, i),
			Start: ms(40 + i/10), End: ms(60 + i/10), Attributes: map[string]any{"kvlive.result": "live"},
			Links:  []events.SpanLink{{TraceID: rolloutTrace, SpanID: spanID(2)}},
			Events: []events.SpanEvent{{Name: "pin moved", Time: ms(50 + i/10)}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := NewTree(rolloutTrace, spans).Render(io.Discard, WaterfallOptions{Color: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadSpans reads a 10,000-VM rollout's trace from the stream.
func BenchmarkReadSpans(b *testing.B) {
	f := newFixture(b)
	for i := range 10_000 {
		s := events.Span{TraceID: vmTrace(i), SpanID: spanID(100 + i), Name: fmt.Sprintf("applier.apply ns-%d/vm-%d", i%10, i),
			Start: ms(i), End: ms(i + 5), Attributes: map[string]any{"kvlive.result": "live", "kvlive.event.id": editID},
			Links: []events.SpanLink{{TraceID: rolloutTrace, SpanID: spanID(2)}}}
		body, _ := events.MarshalSpan(s)
		if _, err := f.js.PublishAsync(events.SpanSubject(rolloutTrace), body); err != nil {
			b.Fatal(err)
		}
	}
	<-f.js.PublishAsyncComplete()
	b.ResetTimer()
	for b.Loop() {
		spans, err := f.reader().Spans(b.Context(), rolloutTrace)
		if err != nil || len(spans) != 10_000 {
			b.Fatalf("%d spans, %v", len(spans), err)
		}
	}
}
