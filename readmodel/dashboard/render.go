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

// wrap writes text escaped between literal markup.
func (m *markup) wrap(open, text, close string) {
	m.raw(open)
	m.text(text)
	m.raw(close)
}

// wrapIf is wrap when text is set, and nothing otherwise.
func (m *markup) wrapIf(open, text, close string) {
	if text != "" {
		m.wrap(open, text, close)
	}
}

// textf writes the formatted text escaped.
func (m *markup) textf(format string, args ...any) { m.text(fmt.Sprintf(format, args...)) }

// num writes an integer.
func (m *markup) num(n int) { m.WriteString(strconv.Itoa(n)) }

// numIf writes n between literal markup when it is not zero, and nothing
// otherwise.
func (m *markup) numIf(open string, n int, close string) {
	if n != 0 {
		m.raw(open)
		m.num(n)
		m.raw(close)
	}
}

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
		m.wrap("<tr data-id=\"", r.ID, "\" class=\"state-")
		m.text(string(r.State))
		m.wrap("\">\n<td><a href=\"/rollouts/", inspect.EventPath(r.ID), "\">")
		m.text(r.ID)
		m.wrap("</a><div class=\"sub\">", r.Type, "</div></td>\n<td>")
		m.text(r.Object)
		m.raw("</td>\n<td class=\"state\">")
		if r.State != "" {
			m.text(string(r.State))
		} else {
			m.raw("pending")
		}
		m.wrapIf("<div class=\"sub error\">", r.DeadLetter, "</div>")
		m.wrapIf("<div class=\"sub error\">policy: ", r.PolicyError, "</div>")
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
		m.verdicts(r.Verdicts, r.Awaited, r.Differ, "differ")
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
		m.wrapIf("<div class=\"sub error\">", r.Note, "</div>")
		m.wrap("</td>\n<td>", ago(v.Now, r.Time), "</td>\n<td>")
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
	m.wrap("<h1>Rollout <code>", v.ID, "</code></h1>\n")
	m.wrapIf("<p class=\"done\" id=\"done\">", v.Done, "</p>\n")
	m.wrap("<div id=\"rollout\" hx-sse:connect=\"/live/rollout/", inspect.EventPath(v.ID)+"?vms="+url.QueryEscape(v.Filter), "\" hx-swap=\"innerHTML\">\n")
	v.live(m)
	m.raw("</div>\n")
	m.foot()
}

// live is a rollout's summary, batches, actions, VMs, trace and status.
func (v rolloutView) live(m *markup) {
	a := v.A
	m.wrap("<section class=\"summary\">\n<p class=\"progress\" id=\"progress\">", v.Progress, "</p>\n<dl>\n<dt>State</dt><dd id=\"state\" class=\"state-")
	m.text(string(a.Phase))
	m.raw("\">")
	m.text(string(a.Phase))
	if why := a.Control.Describe(); a.Phase != "running" && why != "" {
		m.wrap(" <span class=\"sub\" id=\"why\">(", why, ")</span>")
	}
	m.raw("</dd>\n<dt>Moved / planned</dt><dd id=\"moved\">")
	m.num(moved(a.Outcomes))
	m.raw(" / ")
	if a.Recorded {
		m.num(a.Planned)
	} else {
		m.raw("not planned yet")
	}
	m.wrap("</dd>\n<dt>Outcomes</dt><dd>", results(a.Outcomes), "</dd>\n")
	if len(a.Verdicts) > 0 {
		m.raw("<dt>KubeVirt's verdicts</dt><dd id=\"verdicts\">")
		m.verdicts(a.Verdicts, a.Awaited, a.Differ, "differ from the prediction")
		m.raw("</dd>\n")
	}
	if g := a.Migrations; g != nil && (g.Unfinished != 0 || g.Waiting != "" || g.ToMove != 0 || len(g.Failed) > 0) {
		m.raw("<dt>Migrations</dt><dd id=\"migrations\">")
		m.textf("%d running, %d queued in KubeVirt, %d live moves to come (%d of the budget's slots in use%s)", g.Running, g.Queued, g.ToMove, g.InUse, inspect.SlotHolders(g.Holders))
		if len(g.Failed) > 0 {
			m.wrap("; <span class=\"error\">failed: ", strings.Join(g.Failed, ", "), "</span>")
		}
		if g.Waiting != "" {
			m.text("; live moves wait: " + g.Waiting)
		}
		if g.Left != 0 {
			m.textf("; about %s left (%s)", shortDuration(g.Left), g.Pace)
		}
		m.raw("</dd>\n")
	}
	m.numIf("<dt>Dead letters</dt><dd class=\"error\">", a.DeadLetters, " (<a href=\"/dead-letters\">see them</a>)</dd>\n")
	m.numIf("<dt>Held</dt><dd>", a.Held, " plans</dd>\n")
	m.raw("</dl>\n</section>\n\n")
	v.batches(m)
	v.actions(m)
	v.vms(m)
	v.trace(m)
	m.wrap("<details><summary>kvlive rollout status</summary><pre>", v.Status, "</pre></details>\n")
}

// batches is a batched rollout's batches and gate.
func (v rolloutView) batches(m *markup) {
	if len(v.Batches) == 0 {
		return
	}
	m.raw("<section class=\"batches\">\n<h2>Batches</h2>\n<ol>")
	for _, b := range v.Batches {
		m.wrap("<li class=\"batch-", b.Class, "\">")
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
			m.wrap("<a class=\"button\" id=\"action-", a, "\" href=\"/act/")
			m.text(a + "/" + inspect.EventPath(v.ID))
			m.wrap("\">", title(a), "</a> ")
		}
		m.raw("\n")
	} else {
		m.wrap("<p class=\"sub\" id=\"readonly\">Read only: ", v.Why, ".</p>\n")
	}
	m.raw("</section>\n\n")
}

// vms is the VM table under its filters.
func (v rolloutView) vms(m *markup) {
	m.raw("<section class=\"vms\">\n<h2>VMs</h2>\n<p class=\"filters\">")
	for _, f := range filters {
		m.wrap("<a href=\"/rollouts/", inspect.EventPath(v.ID)+"?vms="+url.QueryEscape(f), "\" class=\"")
		if f == v.Filter {
			m.raw("current")
		}
		m.wrap("\" id=\"filter-", f, "\">")
		m.textf("%s (%d)", f, v.Counts[f])
		m.raw("</a> ")
	}
	m.raw("</p>\n")
	if len(v.VMs) == 0 {
		m.raw("<p class=\"empty\">No VM ")
		if v.Filter != "all" {
			m.wrap("matches \"", v.Filter, "\"")
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
		m.wrap(" result-", string(row.Result), "\" data-vm=\"")
		m.text(row.VM.Namespace + "/" + row.VM.Name)
		m.wrap("\">\n<td>", row.VM.Namespace+"/"+row.VM.Name, "</td><td>")
		m.num(row.Batch + 1)
		m.wrap("</td><td>", string(row.Result), "</td><td class=\"verdict\">")
		m.text(row.Observed())
		m.raw("</td>\n<td class=\"reason\">")
		if c := row.Current(); c != nil {
			m.text(c.Reason)
			if c.Message != "" {
				m.text(" — " + c.Message)
			}
		} else {
			m.text(row.Reason)
			m.wrapIf(" <span class=\"error\">", row.Error, "</span>")
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
		m.wrap("<p class=\"error\">", t.Err, "</p>")
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
			m.wrap("</span><span class=\"bar\"><span style=\"margin-left: ", pct(s.Offset), "; width: ")
			m.text(pct(s.Width))
			m.wrap("\"></span></span><span class=\"took\">", s.Duration, "</span><span class=\"result\">")
			m.text(s.Result)
			m.raw("</span>\n</div>")
		}
		m.raw("</div>\n")
		m.numIf("<p class=\"more\">", t.More, " more spans: kvlive trace shows them all.</p>\n")
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
	m.wrap("</h1>\n<p class=\"error\" id=\"error\">", f.Message, "</p>\n<p><a href=\"/\">Back to the rollouts</a></p>\n")
	m.foot()
}

// page asks before an action.
func (v confirmView) page(m *markup) {
	m.head(v.Action + " " + v.ID)
	m.wrap("<h1>", title(v.Action)+" "+v.ID+"?", "</h1>\n<p class=\"progress\">")
	m.text(v.Progress)
	m.wrap("</p>\n<p>", v.Words, "</p>\n<form method=\"post\" action=\"/act/")
	m.text(v.Action + "/" + inspect.EventPath(v.ID))
	m.raw("\">\n")
	if v.Action != "undo" && v.Action != "promote" {
		m.raw("<label>Reason (recorded with the change): <input type=\"text\" name=\"reason\" size=\"60\"></label>")
	}
	if v.Batch > 0 {
		m.raw("<input type=\"hidden\" name=\"batch\" value=\"")
		m.text(strconv.Itoa(v.Batch))
		m.raw("\">")
	}
	m.wrap("\n<p><button type=\"submit\" id=\"confirm\" class=\"danger\">", title(v.Action), "</button> <a href=\"/rollouts/")
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
			m.wrap("<tr><td>", strconv.FormatUint(l.Seq, 10), "</td><td>")
			m.text(when(l.Time))
			m.wrap("</td><td>", l.Stage, "</td><td><code>")
			m.text(l.Subject)
			m.wrap("</code></td><td class=\"reason\">", l.Reason, "</td></tr>")
		}
		m.raw("</tbody>\n</table>\n")
		m.numIf("<p class=\"more\">", v.More, " older dead letters: kvlive dlq list shows them all.</p>")
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
			m.wrap("</td><td>", strconv.FormatInt(r.Generation, 10), "</td><td>")
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

// verdicts writes KubeVirt's verdicts by kind and the awaited, in rollout
// status's words, and how many differ from the prediction, if any.
func (m *markup) verdicts(counts map[events.Observed]int, awaited, differ int, differWords string) {
	list := map[string]int{"awaited": awaited}
	for v, n := range counts {
		list[string(v)] = n
	}
	m.text(inspect.VerdictList(list))
	if differ != 0 {
		m.raw(` <span class="differ">(`)
		m.num(differ)
		m.wrap(" ", differWords, ")</span>")
	}
}
