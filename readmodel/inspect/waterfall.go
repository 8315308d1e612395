package inspect

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"kvlive/events"
	"kvlive/internal/printer"
)

// WaterfallOptions say how Tree.Render draws a trace.
type WaterfallOptions struct {
	// Color paints results and bars with ANSI colours (see UseColor).
	Color bool
	// BarWidth is the timeline's width in columns; DefaultBarWidth when zero.
	BarWidth int
	// MaxDepth shows this many levels (0: all); a line whose children are
	// hidden says how many spans it hides.
	MaxDepth int
	// Width, when not zero, is the terminal's: names, bars and results are
	// narrowed (names and results cut with "…") so no line wraps.
	Width int
	// Whole draws every name uncut, however long (-o wide).
	Whole bool
}

// resultRoom is how much of a narrowed line is kept for a span's result.
const resultRoom = 12

// minBarWidth is the narrowest a timeline is drawn.
const minBarWidth = 10

// DefaultBarWidth is the timeline's width when WaterfallOptions leave it zero.
const DefaultBarWidth = 40

// maxLabelWidth caps the name column; longer names are cut with "…".
const maxLabelWidth = 72

// Span attributes that carry a VM's result (applier) or planned action.
const (
	attrResult     = "kvlive.result"
	attrPlanAction = "kvlive.plan.action"
)

// line is one span as drawn.
type line struct {
	node   *Node
	depth  int
	label  string
	hidden int
}

// Render draws the tree as a waterfall: one line per span with its name
// indented under its parent (linked spans marked ↪), its duration, a bar
// placing it in the trace's time window, and its result; a span's events
// follow it, each with its offset from the span's start.
func (t *Tree) Render(w io.Writer, o WaterfallOptions) error {
	if o.BarWidth <= 0 {
		o.BarWidth = DefaultBarWidth
	}
	labelCap := maxLabelWidth
	switch {
	case o.Whole:
		labelCap, o.Width = math.MaxInt, 0
	case o.Width > 0:
		labelCap = min(maxLabelWidth, max(24, o.Width*2/5))
	}
	lines := t.lines(o.MaxDepth, labelCap)
	width := 0
	for _, l := range lines {
		width = max(width, utf8.RuneCountInString(l.label))
	}
	if o.Width > 0 {
		// name, duration and the bar's borders, two spaces apart.
		fixed := width + 2 + 8 + 2 + 2
		o.BarWidth = max(minBarWidth, min(o.BarWidth, o.Width-fixed-2-resultRoom))
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, printer.Cut(fmt.Sprintf("trace %s · %d spans · %s · from %s", t.TraceID, t.size, formatDuration(t.End.Sub(t.Start)),
		t.Start.UTC().Format("2006-01-02T15:04:05.000Z07:00")), o.Width))
	fmt.Fprintf(bw, "%-*s  %8s  %s\n", width, "", "", ruler(o.BarWidth, t.End.Sub(t.Start)))
	for _, l := range lines {
		t.writeLine(bw, l, width, o)
	}
	return bw.Flush()
}

// lines lists the spans to draw in tree order, with their labels.
func (t *Tree) lines(maxDepth, labelCap int) []line {
	lines := make([]line, 0, t.size)
	t.Walk(func(n *Node, depth int) bool {
		l := line{node: n, depth: depth, label: printer.Cut(label(n, depth), labelCap)}
		deeper := maxDepth <= 0 || depth+1 < maxDepth
		if !deeper {
			l.hidden = subtreeSize(n) - 1
		}
		lines = append(lines, l)
		return deeper
	})
	return lines
}

func label(n *Node, depth int) string {
	s := strings.Repeat("  ", depth)
	if n.Linked {
		s += "↪ "
	}
	return s + n.Span.Name
}

func subtreeSize(n *Node) int {
	size := 1
	for _, c := range n.Children {
		size += subtreeSize(c)
	}
	return size
}

// writeLine writes one span and its events; w is buffered, and its first
// write error comes back from Flush.
func (t *Tree) writeLine(w *bufio.Writer, l line, width int, o WaterfallOptions) {
	s := l.node.Span
	result, colour := spanResult(s)
	fmt.Fprintf(w, "%-*s  %8s  %s", width, l.label, formatDuration(s.Duration()), t.bar(s, colour, o))
	room := 0 // what is left of the line, when it must fit
	if o.Width > 0 {
		room = max(o.Width-(width+2+8+2+o.BarWidth+2)-2, 1)
	}
	tail := result
	if l.hidden > 0 {
		tail = strings.TrimPrefix(fmt.Sprintf("%s  (+%d spans)", result, l.hidden), "  ")
	}
	if tail != "" {
		tail = printer.Cut(tail, room)
		if result != "" && strings.HasPrefix(tail, result) {
			tail = paint(result, colour, o.Color) + tail[len(result):]
		}
		fmt.Fprint(w, "  "+tail)
	}
	fmt.Fprintln(w)
	indent := strings.Repeat("  ", l.depth+1)
	for _, e := range s.Events {
		fmt.Fprintln(w, printer.Cut(fmt.Sprintf("%s· %s +%s", indent, e.Name, formatDuration(e.Time.Sub(s.Start))), o.Width))
	}
}

// bar places s in the trace's window: at least one cell, so the shortest
// span still shows where it ran.
func (t *Tree) bar(s events.Span, colour string, o WaterfallOptions) string {
	cells := o.BarWidth
	from, to := 0, cells
	if total := t.End.Sub(t.Start); total > 0 {
		scale := float64(cells) / float64(total)
		from = min(int(float64(s.Start.Sub(t.Start))*scale), cells-1)
		to = min(max(int(math.Ceil(float64(s.End.Sub(t.Start))*scale)), from+1), cells)
	}
	filled := paint(strings.Repeat("█", to-from), colour, o.Color)
	return "│" + strings.Repeat(" ", from) + filled + strings.Repeat(" ", cells-to) + "│"
}

// ruler labels the timeline's ends: 0 and the trace's length.
func ruler(cells int, total time.Duration) string {
	end := formatDuration(total)
	gap := max(cells+2-1-utf8.RuneCountInString(end), 1)
	return "0" + strings.Repeat(" ", gap) + end
}

// spanResult is what a span says became of its VM (SpanResult) and the
// colour it is shown in; a span whose status is an error is red.
func spanResult(s events.Span) (string, string) {
	result, failed := SpanResult(s)
	if failed {
		return result, ansiRed
	}
	return result, resultColours[events.Result(result)]
}

// SpanResult is what a span says became of its VM: the applier's result,
// or the planned action; failed when the span's status is an error, whose
// message then follows the result.
func SpanResult(s events.Span) (result string, failed bool) {
	result, _ = s.Attributes[attrResult].(string)
	if result == "" {
		result, _ = s.Attributes[attrPlanAction].(string)
	}
	if s.StatusCode != "error" {
		return result, false
	}
	if result == "" {
		result = "error"
	}
	if s.StatusMessage != "" {
		result += ": " + s.StatusMessage
	}
	return result, true
}

// FormatDuration is how the trace views print a duration (formatDuration).
func FormatDuration(d time.Duration) string { return formatDuration(d) }

// formatDuration keeps three significant digits or so: 850µs, 12.3ms, 1.25s.
func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + formatDuration(-d)
	case d < time.Microsecond:
		return strconv.FormatInt(d.Nanoseconds(), 10) + "ns"
	case d < time.Millisecond:
		return decimal(float64(d)/float64(time.Microsecond), 0) + "µs"
	case d < time.Second:
		return decimal(float64(d)/float64(time.Millisecond), 1) + "ms"
	case d < time.Minute:
		return decimal(d.Seconds(), 2) + "s"
	}
	return d.Round(time.Second).String()
}

// decimal rounds f to digits decimals and drops trailing zeros: 12, 12.5.
func decimal(f float64, digits int) string {
	return strconv.FormatFloat(math.Round(f*math.Pow10(digits))/math.Pow10(digits), 'f', -1, 64)
}
