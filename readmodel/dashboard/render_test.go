package dashboard

import (
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/readmodel/inspect"
	"kvlive/rollout"
)

// TestPagesEscapeWhatTheRecordsSay: whatever a record holds (a reason, a
// span's name, a dead letter's subject, an event id) reaches the page as
// text, never as markup, in elements and in attributes alike.
func TestPagesEscapeWhatTheRecordsSay(t *testing.T) {
	const evil = `"><script>alert(1)</script>`
	row := inspect.Row{Outcome: events.Outcome{EventID: "e", VM: events.VMRef{Namespace: "ns", Name: "vm" + evil}, Result: events.ResultFailed,
		Reason: "bad " + evil, Error: evil}}
	pages := map[string]func(*markup){
		"rollouts": rolloutsView{Now: time.Now(), Rollouts: []rolloutRow{{EventSummary: inspect.EventSummary{ID: "id" + evil, Type: evil, Object: evil,
			State: rollout.Phase(evil), DeadLetter: evil, PolicyError: evil}, Note: evil}}}.page,
		"rollout": rolloutView{ID: "id" + evil, A: rollout.Account{Phase: rollout.Phase(evil), Control: events.Control{Gate: evil}}, Status: evil,
			Progress: evil, Batches: []batchView{{Number: 1, Size: 1, State: evil, Class: evil}}, VMs: []inspect.Row{row}, Matched: 2,
			Filter: "all", Counts: map[string]int{}, Trace: traceView{ID: evil, Spans: []spanView{{Name: evil, Result: evil, Duration: evil}}},
			Actions: []string{"pause"}, Writable: true, Done: evil}.page,
		"read only":    rolloutView{ID: "id", Why: evil, Filter: evil, Trace: traceView{Err: evil}}.page,
		"error":        failure{Status: 500, Title: evil, Message: evil}.page,
		"confirm":      confirmView{Action: "abort", ID: "id" + evil, Words: evil, Progress: evil}.page,
		"dead letters": deadLettersView{Letters: []inspect.Letter{{Stage: evil, Subject: evil, Reason: evil}}}.page,
	}
	for name, write := range pages {
		page := render(write)
		if strings.Contains(page, "<script>") {
			t.Errorf("the %s page writes a record as markup:\n%s", name, page)
		}
		if !strings.Contains(page, "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("the %s page does not show the record as text:\n%s", name, page)
		}
	}
}

// TestTitleCapitalisesTheFirstLetterOnly: an action's name is shown with
// its first letter capitalised, a multi-byte one whole, and an empty name
// stays empty instead of ending the page's render.
func TestTitleCapitalisesTheFirstLetterOnly(t *testing.T) {
	for in, want := range map[string]string{"pause": "Pause", "": "", "élan": "Élan", "Resume": "Resume"} {
		if got := title(in); got != want {
			t.Errorf("title(%q) = %q, want %q", in, got, want)
		}
	}
}
