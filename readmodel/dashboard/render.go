package dashboard

import (
	"fmt"
	"html"
	"net/url"
	"strconv"
	"strings"

	"kvlive/events"
	"kvlive/readmodel/inspect"
)

// The pages are written by the functions below, not by html/template: a
// program that executes a text/template keeps every exported method of
// every type it links (the templates look methods up by name, and the
// linker cannot tell which), and the dashboard, linked into every kvlive
// command, took the binary from 53 MB to 93 MB and every kvlive process's
// resident pages of it up by some 16 MiB. Text and attribute values go
// through markup.text, which escapes them; only this file's literal
// markup is written as is.

// markup is an HTML page or fragment being written.
type markup struct{ strings.Builder }

// raw writes literal markup.
func (m *markup) raw(parts ...string) {
	for _, p := range parts {
		m.WriteString(p)
	}
}

// text writes s escaped, for an element's text or a quoted attribute's
// value.
func (m *markup) text(s string) { m.WriteString(html.EscapeString(s)) }

// textf writes the formatted text escaped.
func (m *markup) textf(format string, args ...any) { m.text(fmt.Sprintf(format, args...)) }

// num writes an integer.
func (m *markup) num(n int) { m.WriteString(strconv.Itoa(n)) }

// head opens a page titled title.
func (m *markup) head(title string) {
	m.raw("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>")
	m.text(title)
	m.raw(" · kvlive</title>\n<link rel=\"stylesheet\" href=\"/assets/style.css\">\n",
		"<script src=\"/assets/htmx.min.js\"></script>\n<script src=\"/assets/hx-sse.min.js\"></script>\n</head>\n<body>\n<header>\n",
		"<a class=\"brand\" href=\"/\">kvlive</a>\n",
		"<nav><a href=\"/\">Rollouts</a> <a href=\"/drift\">Drift</a> <a href=\"/dead-letters\">Dead letters</a></nav>\n</header>\n<main>\n")
}

// foot closes a page head opened.
func (m *markup) foot() {
	m.raw("</main>\n<footer>kvlive's own records, read over NATS; live pages follow the streams.</footer>\n</body>\n</html>\n")
}

// render writes a whole page or a fragment.
func render(write func(*markup)) string {
	var m markup
	write(&m)
	return m.String()
}

// page is the rollouts page, whose table follows the streams.
func (v rolloutsView) page(m *markup) {
	m.head("Rollouts")
	m.raw("<h1>Rollouts</h1>\n<div id=\"rollouts\" hx-sse:connect=\"/live/rollouts\" hx-swap=\"innerHTML\">\n")
	v.live(m)
	m.raw("</div>\n")
	m.foot()
}

// live is the rollouts table.
func (v rolloutsView) live(m *markup) {
	if len(v.Rollouts) == 0 {
		m.raw("<p class=\"empty\">No rollout is recorded yet: edit an instance type, or run kvlive switch.</p>\n")
		return
	}
	m.raw("<table class=\"rollouts\">\n<thead><tr><th>Rollout</th><th>Object</th><th>State</th><th>Batch</th><th>Moved / planned</th>",
		"<th>Verdicts</th><th>Migrations</th><th>Age</th><th>Time left</th></tr></thead>\n<tbody>\n")
	for _, r := range v.Rollouts {
		m.raw("<tr data-id=\"")
		m.text(r.ID)
		m.raw("\" class=\"state-")
		m.text(string(r.State))
		m.raw("\">\n<td><a href=\"/rollouts/")
		m.text(inspect.EventPath(r.ID))
		m.raw("\">")
		m.text(r.ID)
		m.raw("</a><div class=\"sub\">")
		m.text(r.Type)
		m.raw("</div></td>\n<td>")
		m.text(r.Object)
		m.raw("</td>\n<td class=\"state\">")
		if r.State != "" {
			m.text(string(r.State))
		} else {
			m.raw("pending")
		}
		if r.DeadLetter != "" {
			m.raw("<div class=\"sub error\">")
			m.text(r.DeadLetter)
			m.raw("</div>")
		}
		if r.PolicyError != "" {
			m.raw("<div class=\"sub error\">policy: ")
			m.text(r.PolicyError)
			m.raw("</div>")
		}
		m.raw("</td>\n<td>")
		if len(r.Batches) > 0 {
			m.textf("%d/%d", r.Batch+1, len(r.Batches))
		} else {
			m.raw("-")
		}
		m.raw("</td>\n<td class=\"moved\">")
		m.num(r.Moved)
		m.raw(" / ")
		if r.Planned != nil {
			m.num(*r.Planned)
		} else {
			m.raw("-")
		}
		m.raw("</td>\n<td class=\"verdicts\">")
		m.text(verdictList(r.Verdicts, r.Awaited))
		if r.Differ != 0 {
			m.raw(" <span class=\"differ\">(")
			m.num(r.Differ)
			m.raw(" differ)</span>")
		}
		m.raw("</td>\n<td class=\"migrations\">")
		if g := r.Migrations; g != nil {
			m.textf("%d running, %d queued", g.Running, g.Queued)
			if len(g.Failed) > 0 {
				m.raw(", <span class=\"error\">")
				m.num(len(g.Failed))
				m.raw(" failed</span>")
			}
		} else {
			m.raw("-")
		}
		if r.Note != "" {
			m.raw("<div class=\"sub error\">")
			m.text(r.Note)
			m.raw("</div>")
		}
		m.raw("</td>\n<td>")
		m.text(ago(v.Now, r.Time))
		m.raw("</td>\n<td>")
		if g := r.Migrations; g != nil && g.Left != 0 {
			m.text("about " + shortDuration(g.Left))
		} else {
			m.raw("-")
		}
		m.raw("</td>\n</tr>")
	}
	m.raw("\n</tbody>\n</table>\n")
}

// page is a rollout's page, whose live part follows the streams.
func (v rolloutView) page(m *markup) {
	m.head(v.ID)
	m.raw("<h1>Rollout <code>")
	m.text(v.ID)
	m.raw("</code></h1>\n")
	if v.Done != "" {
		m.raw("<p class=\"done\" id=\"done\">")
		m.text(v.Done)
		m.raw("</p>\n")
	}
	m.raw("<div id=\"rollout\" hx-sse:connect=\"/live/rollout/")
	m.text(inspect.EventPath(v.ID) + "?vms=" + url.QueryEscape(v.Filter))
	m.raw("\" hx-swap=\"innerHTML\">\n")
	v.live(m)
	m.raw("</div>\n")
	m.foot()
}

// live is a rollout's summary, batches, actions, VMs, trace and status.
func (v rolloutView) live(m *markup) {
	a := v.A
	m.raw("<section class=\"summary\">\n<p class=\"progress\" id=\"progress\">")
	m.text(v.Progress)
	m.raw("</p>\n<dl>\n<dt>State</dt><dd id=\"state\" class=\"state-")
	m.text(string(a.Phase))
	m.raw("\">")
	m.text(string(a.Phase))
	if why := a.Control.Describe(); a.Phase != "running" && why != "" {
		m.raw(" <span class=\"sub\" id=\"why\">(")
		m.text(why)
		m.raw(")</span>")
	}
	m.raw("</dd>\n<dt>Moved / planned</dt><dd id=\"moved\">")
	m.num(moved(a.Outcomes))
	m.raw(" / ")
	if a.Recorded {
		m.num(a.Planned)
	} else {
		m.raw("not planned yet")
	}
	m.raw("</dd>\n<dt>Outcomes</dt><dd>")
	m.text(results(a.Outcomes))
	m.raw("</dd>\n")
	if len(a.Verdicts) > 0 {
		m.raw("<dt>KubeVirt's verdicts</dt><dd id=\"verdicts\">")
		m.text(verdictList(a.Verdicts, a.Awaited))
		if a.Differ != 0 {
			m.raw(" <span class=\"differ\">(")
			m.num(a.Differ)
			m.raw(" differ from the prediction)</span>")
		}
		m.raw("</dd>\n")
	}
	if g := a.Migrations; g != nil && (g.Unfinished != 0 || g.Waiting != "" || g.ToMove != 0 || len(g.Failed) > 0) {
		m.raw("<dt>Migrations</dt><dd id=\"migrations\">")
		m.textf("%d running, %d queued in KubeVirt, %d live moves to come (%d of the budget's slots in use)", g.Running, g.Queued, g.ToMove, g.InUse)
		if len(g.Failed) > 0 {
			m.raw("; <span class=\"error\">failed: ")
			m.text(strings.Join(g.Failed, ", "))
			m.raw("</span>")
		}
		if g.Waiting != "" {
			m.text("; live moves wait: " + g.Waiting)
		}
		if g.Left != 0 {
			m.textf("; about %s left (%s)", shortDuration(g.Left), g.Pace)
		}
		m.raw("</dd>\n")
	}
	if a.DeadLetters != 0 {
		m.raw("<dt>Dead letters</dt><dd class=\"error\">")
		m.num(a.DeadLetters)
		m.raw(" (<a href=\"/dead-letters\">see them</a>)</dd>\n")
	}
	if a.Held != 0 {
		m.raw("<dt>Held</dt><dd>")
		m.num(a.Held)
		m.raw(" plans</dd>\n")
	}
	m.raw("</dl>\n</section>\n\n")
	v.batches(m)
	v.actions(m)
	v.vms(m)
	v.trace(m)
	m.raw("<details><summary>kvlive rollout status</summary><pre>")
	m.text(v.Status)
	m.raw("</pre></details>\n")
}

// batches is a batched rollout's batches and gate.
func (v rolloutView) batches(m *markup) {
	if len(v.Batches) == 0 {
		return
	}
	m.raw("<section class=\"batches\">\n<h2>Batches</h2>\n<ol>")
	for _, b := range v.Batches {
		m.raw("<li class=\"batch-")
		m.text(b.Class)
		m.raw("\">")
		m.textf("batch %d: %d VMs, %s", b.Number, b.Size, b.State)
		m.raw("</li>")
	}
	m.raw("</ol>\n")
	if c := v.A.Control; c.Gate != "" {
		m.raw("<p class=\"gate\" id=\"gate\">Gate: ")
		if c.GateAt.IsZero() {
			m.raw("<strong>held</strong>: ")
		} else {
			m.textf("batch %d passed at %s: ", v.A.Batch+1, when(c.GateAt))
		}
		m.text(c.Gate)
		m.raw("</p>\n")
	}
	m.raw("</section>\n\n")
}

// actions are the rollout's buttons, or why there are none.
func (v rolloutView) actions(m *markup) {
	m.raw("<section class=\"actions\" id=\"actions\">\n")
	if v.Writable {
		for _, a := range v.Actions {
			m.raw("<a class=\"button\" id=\"action-")
			m.text(a)
			m.raw("\" href=\"/act/")
			m.text(a + "/" + inspect.EventPath(v.ID))
			m.raw("\">")
			m.text(title(a))
			m.raw("</a> ")
		}
		m.raw("\n")
	} else {
		m.raw("<p class=\"sub\" id=\"readonly\">Read only: ")
		m.text(v.Why)
		m.raw(".</p>\n")
	}
	m.raw("</section>\n\n")
}

// vms is the VM table under its filters.
func (v rolloutView) vms(m *markup) {
	m.raw("<section class=\"vms\">\n<h2>VMs</h2>\n<p class=\"filters\">")
	for _, f := range filters {
		m.raw("<a href=\"/rollouts/")
		m.text(inspect.EventPath(v.ID) + "?vms=" + url.QueryEscape(f))
		m.raw("\" class=\"")
		if f == v.Filter {
			m.raw("current")
		}
		m.raw("\" id=\"filter-")
		m.text(f)
		m.raw("\">")
		m.textf("%s (%d)", f, v.Counts[f])
		m.raw("</a> ")
	}
	m.raw("</p>\n")
	if len(v.VMs) == 0 {
		m.raw("<p class=\"empty\">No VM ")
		if v.Filter != "all" {
			m.raw("matches \"")
			m.text(v.Filter)
			m.raw("\"")
		} else {
			m.raw("has an outcome yet")
		}
		m.raw(".</p>\n</section>\n\n")
		return
	}
	m.raw("<table class=\"vms\" id=\"vms\">\n<thead><tr><th>VM</th><th>Batch</th><th>Predicted</th><th>KubeVirt's verdict</th><th>Reason</th></tr></thead>\n<tbody>")
	for _, row := range v.VMs {
		m.raw("<tr class=\"")
		if row.Differs() {
			m.raw("differs")
		}
		m.raw(" result-")
		m.text(string(row.Result))
		m.raw("\" data-vm=\"")
		m.text(row.VM.Namespace + "/" + row.VM.Name)
		m.raw("\">\n<td>")
		m.text(row.VM.Namespace + "/" + row.VM.Name)
		m.raw("</td><td>")
		m.num(row.Batch + 1)
		m.raw("</td><td>")
		m.text(string(row.Result))
		m.raw("</td><td class=\"verdict\">")
		m.text(row.Observed())
		m.raw("</td>\n<td class=\"reason\">")
		if c := row.Current(); c != nil {
			m.text(c.Reason)
			if c.Message != "" {
				m.text(" — " + c.Message)
			}
		} else {
			m.text(row.Reason)
			if row.Error != "" {
				m.raw(" <span class=\"error\">")
				m.text(row.Error)
				m.raw("</span>")
			}
		}
		m.raw("</td>\n</tr>")
	}
	m.raw("</tbody>\n</table>\n")
	if v.Matched > len(v.VMs) {
		m.raw("<p class=\"more\">")
		m.textf("%d of %d shown: kvlive outcomes %s lists them all.", len(v.VMs), v.Matched, v.ID)
		m.raw("</p>\n")
	}
	m.raw("</section>\n\n")
}

// trace is the rollout's trace as a waterfall.
func (v rolloutView) trace(m *markup) {
	t := v.Trace
	m.raw("<section class=\"trace\">\n<h2>Trace</h2>\n")
	switch {
	case t.Err != "":
		m.raw("<p class=\"error\">")
		m.text(t.Err)
		m.raw("</p>")
	case len(t.Spans) > 0:
		m.raw("<p class=\"sub\">")
		m.textf("trace %s · %d spans · %s", t.ID, len(t.Spans), shortDuration(t.Total))
		m.raw("</p>\n<div class=\"waterfall\" id=\"waterfall\">")
		for _, s := range t.Spans {
			m.raw("<div class=\"span")
			if s.Failed {
				m.raw(" failed")
			}
			m.raw("\" style=\"--depth: ")
			m.num(s.Depth)
			m.raw("\">\n<span class=\"name\">")
			if s.Linked {
				m.raw("↪ ")
			}
			m.text(s.Name)
			m.raw("</span><span class=\"bar\"><span style=\"margin-left: ")
			m.text(pct(s.Offset))
			m.raw("; width: ")
			m.text(pct(s.Width))
			m.raw("\"></span></span><span class=\"took\">")
			m.text(s.Duration)
			m.raw("</span><span class=\"result\">")
			m.text(s.Result)
			m.raw("</span>\n</div>")
		}
		m.raw("</div>\n")
		if t.More != 0 {
			m.raw("<p class=\"more\">")
			m.num(t.More)
			m.raw(" more spans: kvlive trace shows them all.</p>\n")
		}
	default:
		m.raw("<p class=\"empty\">No spans stored for this rollout yet.</p>")
	}
	m.raw("\n</section>\n\n")
}

// page is the error page.
func (f failure) page(m *markup) {
	m.head(f.Title)
	m.raw("<h1>")
	m.textf("%d %s", f.Status, f.Title)
	m.raw("</h1>\n<p class=\"error\" id=\"error\">")
	m.text(f.Message)
	m.raw("</p>\n<p><a href=\"/\">Back to the rollouts</a></p>\n")
	m.foot()
}

// page asks before an action.
func (v confirmView) page(m *markup) {
	m.head(v.Action + " " + v.ID)
	m.raw("<h1>")
	m.text(title(v.Action) + " " + v.ID + "?")
	m.raw("</h1>\n<p class=\"progress\">")
	m.text(v.Progress)
	m.raw("</p>\n<p>")
	m.text(v.Words)
	m.raw("</p>\n<form method=\"post\" action=\"/act/")
	m.text(v.Action + "/" + inspect.EventPath(v.ID))
	m.raw("\">\n")
	if v.Action != "undo" && v.Action != "promote" {
		m.raw("<label>Reason (recorded with the change): <input type=\"text\" name=\"reason\" size=\"60\"></label>")
	}
	m.raw("\n<p><button type=\"submit\" id=\"confirm\" class=\"danger\">")
	m.text(title(v.Action))
	m.raw("</button> <a href=\"/rollouts/")
	m.text(inspect.EventPath(v.ID))
	m.raw("\" id=\"cancel\">Cancel</a></p>\n</form>\n")
	m.foot()
}

// page is the dead letters, newest first.
func (v deadLettersView) page(m *markup) {
	m.head("Dead letters")
	m.raw("<h1>Dead letters</h1>\n")
	if len(v.Letters) == 0 {
		m.raw("<p class=\"empty\">No dead letters.</p>")
	} else {
		m.raw("<table class=\"letters\">\n<thead><tr><th>Seq</th><th>When</th><th>Stage</th><th>Subject</th><th>Reason</th></tr></thead>\n<tbody>")
		for _, l := range v.Letters {
			m.raw("<tr><td>")
			m.text(strconv.FormatUint(l.Seq, 10))
			m.raw("</td><td>")
			m.text(when(l.Time))
			m.raw("</td><td>")
			m.text(l.Stage)
			m.raw("</td><td><code>")
			m.text(l.Subject)
			m.raw("</code></td><td class=\"reason\">")
			m.text(l.Reason)
			m.raw("</td></tr>")
		}
		m.raw("</tbody>\n</table>\n")
		if v.More != 0 {
			m.raw("<p class=\"more\">")
			m.num(v.More)
			m.raw(" older dead letters: kvlive dlq list shows them all.</p>")
		}
	}
	m.raw("\n<p class=\"sub\">kvlive dlq retry SEQ sends one back; kvlive dlq show SEQ prints it whole.</p>\n")
	m.foot()
}

// page is drift per instance type and preference.
func (v driftView) page(m *markup) {
	m.head("Drift")
	m.raw("<h1>Drift per instance type and preference</h1>\n")
	switch {
	case !v.Available:
		m.raw("<p class=\"empty\">This dashboard has no cluster to read drift from: kvlive run --dashboard-addr serves it from the pipeline's informer cache, ",
			"and kvlive dashboard with a reachable kubeconfig from one of its own.</p>\n")
	case len(v.Rows) == 0:
		m.raw("<p class=\"empty\">No VM references an instance type or preference.</p>\n")
	default:
		m.raw("<table class=\"drift\">\n<thead><tr><th>Object</th><th>Generation</th><th>VMs</th><th>Latest</th><th>Behind</th><th>Most behind</th>",
			"<th>RestartRequired</th><th>Hot-plug waits</th><th>Stopped</th><th>Unpinned</th></tr></thead>\n<tbody>")
		for _, r := range v.Rows {
			m.raw("<tr>\n<td>")
			m.text(r.Object.Key())
			if r.Missing {
				m.raw(" <span class=\"error\">(missing)</span>")
			}
			m.raw("</td><td>")
			m.text(strconv.FormatInt(r.Generation, 10))
			m.raw("</td><td>")
			m.num(r.Total)
			m.raw("</td><td>")
			m.num(r.Latest)
			m.raw("</td>\n<td")
			if r.Behind != 0 {
				m.raw(" class=\"differ\"")
			}
			m.raw(">")
			m.num(r.Behind)
			m.raw("</td><td>")
			if r.MaxLag != 0 {
				m.textf("%d generations", r.MaxLag)
			} else {
				m.raw("-")
			}
			m.raw("</td>\n<td>")
			m.num(r.RestartRequired)
			m.raw("</td><td>")
			m.num(r.HotplugPending)
			m.raw("</td><td>")
			m.num(r.Stopped)
			m.raw("</td><td>")
			m.num(r.Unpinned)
			m.raw("</td>\n</tr>")
		}
		m.raw("</tbody>\n</table>")
	}
	m.raw("\n")
	m.foot()
}

// verdictList is counts and the awaited in rollout status's words.
func verdictList(counts map[events.Observed]int, awaited int) string {
	m := map[string]int{"awaited": awaited}
	for v, n := range counts {
		m[string(v)] = n
	}
	return inspect.VerdictList(m)
}
