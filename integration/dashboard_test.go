//go:build integration

package integration

import (
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/rollout"
)

// startDashboard starts `kvlive dashboard` on a free loopback port as the
// NATS user user flags name, and returns its address once it serves.
func (e *env) startDashboard(name string, user []string) string {
	e.t.Helper()
	args := append([]string{"dashboard", "--nats-url", e.natsURL, "--addr", "127.0.0.1:0"}, e.natsArgs...)
	p := e.startKvlive(name, append(args, user...))
	served := regexp.MustCompile(`serving the dashboard" url=(\S+)/ `)
	var addr string
	e.waitFor("the "+name+" dashboard to serve", time.Minute, func() (bool, string) {
		m := served.FindStringSubmatch(p.out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil, p.out.Tail(5)
	})
	return addr
}

// TestDashboardInABrowser drives kvlive dashboard in headless Chromium on
// the real servers, as an operator and as a reader (the NATS roles of
// deploy/nats): a rollout appears on the open rollouts page without a
// reload; its page shows the gate that holds the second batch and why;
// promote, after its confirmation, releases that batch (ten pin writes in
// the API server's audit log, none before) while another tab's counts move
// in place to the end; the reader's page has no buttons and its actions
// are refused; an unknown rollout is a 404 page.
func TestDashboardInABrowser(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 20}, secureNATS: true, natsRoles: busRoles})
	// The dashboards start first, before kvlive made its streams: they
	// follow each stream from its first message once it is there.
	operator := e.startDashboard("operator's dashboard", e.natsUser("kvlive-operator"))
	reader := e.startDashboard("reader's dashboard", e.natsUser("kvlive-reader"))
	e.runKvlive("all stages")
	e.waitGenerations()
	b := newBrowser(t)

	list := b.tab()
	list.open(operator + "/")
	list.waitText("#rollouts", "No rollout is recorded yet")
	list.mark()

	e.annotate(itMedium, "batchSize: 50%\npause: manual\n")
	_, id := e.editInstancetype(itMedium, 3, "6Gi")
	row := `tr[data-id="` + id + `"]`
	list.waitText(row+" td.state", "paused")
	list.waitText(row+" td.moved", "10 / 20")
	if !list.marked() {
		t.Error("the rollouts page was loaded again; want the rollout to appear in place")
	}

	page := b.tab()
	page.open(operator + "/rollouts/" + id)
	page.waitText("#why", "batch 1 of 2 passed its gate; rollout promote")
	page.waitText("#moved", "10 / 20")
	if got := page.count("#actions a.button"); got == 0 {
		t.Errorf("the operator's page has no buttons:\n%s", page.text("#actions"))
	}
	if path := os.Getenv("KVLIVE_DASHBOARD_SCREENSHOT"); path != "" {
		// docs/dashboard.png: the rollout held at its gate.
		if err := os.WriteFile(path, page.screenshot(), 0o644); err != nil {
			t.Error(err)
		}
	}
	page.mark()
	before := len(e.pinWrites())
	if before != 10 {
		t.Errorf("%d pin writes before promote, want the first batch's 10", before)
	}

	// A page of another site whose name its DNS rebound to 127.0.0.1 is
	// same-origin to the browser: its promote carries that site's Host and
	// Origin, and the tokenless loopback dashboard refuses it (421).
	rebound, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, operator+"/act/promote/"+id, strings.NewReader(url.Values{"reason": {"rebound"}}.Encode()))
	rebound.Host = "rebind.attacker.example:" + operator[strings.LastIndex(operator, ":")+1:]
	rebound.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rebound.Header.Set("Origin", "http://"+rebound.Host)
	rebound.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(rebound)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a rebound page's promote answered %d, want 421", resp.StatusCode)
	}

	act := b.tab()
	act.open(operator + "/rollouts/" + id)
	act.click("#action-promote")
	act.waitText("h1", "Promote "+id)
	if n := len(e.pinWrites()); n != before {
		t.Errorf("%d pin writes once the confirmation page showed, want %d: nothing moves before it is confirmed", n, before)
	}
	act.click("#confirm")
	act.waitText("#done", "batch 2 of 2 released (10 VMs)")

	page.waitText("#moved", "20 / 20")
	page.waitText("#state", "complete")
	if !page.marked() {
		t.Error("the rollout's page was loaded again; want its counts to move in place")
	}
	moved := map[string]bool{}
	for _, ev := range e.pinWrites()[before:] {
		moved[ev.ObjectRef.Name] = true
	}
	if len(moved) != 10 {
		t.Errorf("promote moved %d VMs (audit log), want the second batch's 10", len(moved))
	}

	ro := b.tab()
	ro.open(reader + "/rollouts/" + id)
	ro.waitText("#readonly", "may not write rollout control records")
	if n := ro.count("#actions a.button, form button"); n != 0 {
		t.Errorf("the reader's page has %d buttons, want none", n)
	}
	resp, err = http.PostForm(reader+"/act/abort/"+id, url.Values{"reason": {"a reader tries"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the reader's abort answered %d, want 403", resp.StatusCode)
	}
	if a, err := rollout.AccountOf(e.ctx, e.js, id); err != nil || a.Control.State == events.StateAborted || strings.Contains(a.Control.Reason, "a reader tries") {
		t.Errorf("after the reader's abort the rollout's control is %s (%s), %v", a.Control.State, a.Control.Reason, err)
	}

	missing := b.tab()
	missing.open(operator + "/rollouts/no/such/rollout")
	if got := missing.text("h1"); got != "404 Not Found" {
		t.Errorf("an unknown rollout's page is headed %q, want 404 Not Found", got)
	}
	if got := missing.text("#error"); !strings.Contains(got, "no rollout no/such/rollout is recorded") {
		t.Errorf("an unknown rollout's page says %q", got)
	}
	code, body, err := httpGet(operator + "/rollouts/no/such/rollout")
	if err != nil || code != http.StatusNotFound || strings.Contains(body, "goroutine") {
		t.Errorf("GET an unknown rollout: %d, %v:\n%s", code, err, body)
	}
}
