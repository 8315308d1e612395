package inspect

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

// ResolveTrace returns the trace id arg names: arg itself when it is a
// trace id (32 hex digits), else the trace of event arg's rollout record.
func (r *Reader) ResolveTrace(ctx context.Context, arg string) (string, error) {
	if IsTraceID(arg) {
		return strings.ToLower(arg), nil
	}
	arg, err := rollout.ResolveEventID(ctx, r.js, arg)
	if err != nil {
		return "", err
	}
	rec, ok, err := rollout.Record(ctx, r.js, arg)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", fmt.Errorf("no rollout recorded for event %s (kvlive events lists the events)", arg)
	case rec.TraceID == "":
		return "", fmt.Errorf("the rollout of event %s recorded no trace", arg)
	}
	return rec.TraceID, nil
}

// IsTraceID reports whether s is a W3C trace id: 32 hex digits, not all zero.
func IsTraceID(s string) bool {
	_, err := trace.TraceIDFromHex(strings.ToLower(s))
	return err == nil
}

// Spans returns every span stored for traceID, each once, including the
// spans of other traces that link to it (the exporter files those under
// this trace too).
func (r *Reader) Spans(ctx context.Context, traceID string) ([]events.Span, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SpanSubject(traceID)}}
	var spans []events.Span
	seen := map[string]bool{}
	err := r.scan(ctx, events.StreamSpans, cfg, func(m jetstream.Msg) {
		stored, err := events.UnmarshalSpans(m.Data())
		if err != nil {
			return
		}
		for _, s := range stored {
			if !seen[s.SpanID] {
				seen[s.SpanID] = true
				spans = append(spans, s)
			}
		}
	})
	if err == nil && len(spans) == 0 {
		err = fmt.Errorf("no spans stored for trace %s", traceID)
	}
	return spans, err
}

// Tree is a trace's spans arranged for display: every span under its
// parent, a span whose parent is not stored but that links to a stored span
// under that span, everything else a root; siblings by start time.
type Tree struct {
	TraceID string
	Roots   []*Node
	// Start and End bound every span of the tree.
	Start, End time.Time
	size       int
}

// Node is one span of a Tree.
type Node struct {
	Span events.Span
	// Linked means the span is not a child of its parent node but links to it
	// (a per-VM span that roots its own trace, linked to the plan span).
	Linked   bool
	Children []*Node
}

// NewTree arranges spans; a span id seen twice keeps its first span.
func NewTree(traceID string, spans []events.Span) *Tree {
	t := &Tree{TraceID: traceID}
	nodes := make(map[string]*Node, len(spans))
	order := make([]*Node, 0, len(spans))
	for _, s := range spans {
		if _, dup := nodes[s.SpanID]; dup {
			continue
		}
		n := &Node{Span: s}
		nodes[s.SpanID], order = n, append(order, n)
		t.widen(s)
	}
	t.size = len(order)
	slices.SortFunc(order, bySpanStart)
	parent := parents(nodes, order)
	breakCycles(order, parent)
	for _, n := range order {
		if p := parent[n]; p != nil {
			p.Children = append(p.Children, n)
		} else {
			t.Roots = append(t.Roots, n)
		}
	}
	return t
}

func (t *Tree) widen(s events.Span) {
	if t.Start.IsZero() || s.Start.Before(t.Start) {
		t.Start = s.Start
	}
	if s.End.After(t.End) {
		t.End = s.End
	}
}

// parents finds each node's display parent: its parent span, else the
// first stored span it links to. A linked node is marked.
func parents(nodes map[string]*Node, order []*Node) map[*Node]*Node {
	parent := make(map[*Node]*Node, len(order))
	for _, n := range order {
		if p := nodes[n.Span.ParentSpanID]; p != nil && p != n {
			parent[n] = p
			continue
		}
		for _, l := range n.Span.Links {
			if p := nodes[l.SpanID]; p != nil && p != n {
				parent[n], n.Linked = p, true
				break
			}
		}
	}
	return parent
}

// breakCycles makes a root of one node on every parent cycle (links can
// point anywhere), so every node is drawn exactly once. Each node has one
// parent, so following parents from each node finds every cycle in O(n).
func breakCycles(order []*Node, parent map[*Node]*Node) {
	const (
		unseen = iota
		onPath
		done
	)
	state := make(map[*Node]uint8, len(order))
	for _, n := range order {
		var path []*Node
		cur := n
		for cur != nil && state[cur] == unseen {
			state[cur] = onPath
			path = append(path, cur)
			cur = parent[cur]
		}
		if cur != nil && state[cur] == onPath {
			delete(parent, cur)
			cur.Linked = false
		}
		for _, p := range path {
			state[p] = done
		}
	}
}

func bySpanStart(a, b *Node) int {
	return cmp.Or(a.Span.Start.Compare(b.Span.Start), cmp.Compare(a.Span.Name, b.Span.Name), cmp.Compare(a.Span.SpanID, b.Span.SpanID))
}

// Len is the number of spans in the tree.
func (t *Tree) Len() int { return t.size }

// Walk calls fn for every node in tree order (depth first, siblings by
// start time) with its depth, roots at 0. When fn returns false the node's
// children are skipped.
func (t *Tree) Walk(fn func(n *Node, depth int) bool) {
	var walk func(ns []*Node, depth int)
	walk = func(ns []*Node, depth int) {
		for _, n := range ns {
			if fn(n, depth) {
				walk(n.Children, depth+1)
			}
		}
	}
	walk(t.Roots, 0)
}

// Spans returns the tree's spans in tree order.
func (t *Tree) Spans() []events.Span {
	spans := make([]events.Span, 0, t.size)
	t.Walk(func(n *Node, _ int) bool {
		spans = append(spans, n.Span)
		return true
	})
	return spans
}

// WriteData writes the tree's spans, in tree order, as a JSON or YAML list.
func (t *Tree) WriteData(w io.Writer, f printer.Format) error {
	return printer.WriteData(w, f, printer.NonNil(t.Spans()))
}
