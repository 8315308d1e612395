package dashboard

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/telemetry"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// recorded publishes a switch of two VMs in two batches as the stages
// record one: the event, the rollout record, the first VM's outcome and
// the second's plan, staged for the second batch.
func recorded(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx := context.Background()
	s := events.SwitchRequest{ID: "0b5c9e1d", From: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"},
		To: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, RequestedAt: t0}
	id := events.SwitchEventID(s.ID)
	publish(t, js, events.SwitchSubject(), id, events.TypeSwitchRequested, &s)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.MarshalRollout(events.Rollout{EventID: id, Planned: 2, PlannedAt: t0, Batches: []int{1, 1},
		Counts: map[events.Result]int{events.ResultLive: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, events.RolloutKey(id), b); err != nil {
		t.Fatal(err)
	}
	outcome(t, js, id, "vm-a", events.ResultLive, 0)
	plan := events.Plan{EventID: id, VM: events.VMRef{Namespace: "shop", Name: "vm-b", UID: "uid-vm-b"}, Action: events.ResultLive, Batch: 1,
		Target: events.Target{Move: events.MoveSwitch, Object: s.To, From: &s.From}}
	publish(t, js, events.StagedSubject(1, id), "plan/"+id+"/vm-b", events.TypePlan, &plan)
	return id
}

func outcome(t *testing.T, js jetstream.JetStream, id, vm string, r events.Result, batch int) {
	t.Helper()
	o := events.Outcome{EventID: id, VM: events.VMRef{Namespace: "shop", Name: vm, UID: "uid-" + vm}, Result: r, Wrote: true, Attempt: 1, Batch: batch, FinishedAt: t0}
	publish(t, js, events.OutcomeSubject("shop", id), events.OutcomeID(id, o.VM.UID, 1), events.TypeOutcome, &o)
}

func publish(t *testing.T, js jetstream.JetStream, subject, id, typ string, p events.Payload) {
	t.Helper()
	body, err := events.Encode(typ, id, "kvlive/test", "", t0, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), events.NewMsg(subject, id, typ, body)); err != nil {
		t.Fatal(err)
	}
}

// serve starts a dashboard over js and returns its address.
func serve(t *testing.T, js jetstream.JetStream, cfg Config) string {
	t.Helper()
	_, url := started(t, js, cfg)
	return url
}

// started starts a dashboard over js and returns it and its address.
func started(t *testing.T, js jetstream.JetStream, cfg Config) (*Server, string) {
	t.Helper()
	cfg.JetStream, cfg.Now = js, func() time.Time { return t0.Add(time.Minute) }
	d, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return d, srv.URL
}

func get(t *testing.T, c *http.Client, u string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" { // Go sends req.Host, never a Host header
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestPages: the rollouts page lists a recorded rollout, its page shows
// its batches, VMs and filters, and an unknown id or page is a 404 page
// that says so.
func TestPages(t *testing.T) {
	js := testenv.JetStream(t)
	id := recorded(t, js)
	base := serve(t, js, Config{})
	c := http.DefaultClient

	code, body := get(t, c, base+"/")
	if code != http.StatusOK || !strings.Contains(body, `href="/rollouts/`+id+`"`) || !strings.Contains(body, "1 / 2") {
		t.Errorf("GET /: %d\n%s", code, body)
	}
	code, body = get(t, c, base+"/rollouts/"+id)
	for _, want := range []string{"shop/vm-a", "batch 1: 1 VMs", "batch 2: 1 VMs, staged", `id="action-pause"`, `id="filter-failed">failed (0)`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET the rollout: %d, no %q in\n%s", code, want, body)
		}
	}
	if code, body = get(t, c, base+"/rollouts/"+id+"?vms=failed"); !strings.Contains(body, `No VM matches "failed"`) {
		t.Errorf("the failed filter kept a live VM: %d\n%s", code, body)
	}
	for _, path := range []string{"/rollouts/switch/unknown", "/nowhere"} {
		code, body = get(t, c, base+path)
		if code != http.StatusNotFound || !strings.Contains(body, "404 Not Found") || strings.Contains(body, "goroutine") {
			t.Errorf("GET %s: %d\n%s", path, code, body)
		}
	}
}

// TestActionsAfterAConfirmation: an action's GET asks and changes nothing,
// its POST pauses the rollout as kvlive rollout pause does and goes back to
// the rollout's page saying so; a cross-origin POST is refused.
func TestActionsAfterAConfirmation(t *testing.T) {
	js := testenv.JetStream(t)
	id := recorded(t, js)
	base := serve(t, js, Config{By: "tester"})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	code, body := get(t, noRedirect, base+"/act/pause/"+id)
	if code != http.StatusOK || !strings.Contains(body, `id="confirm"`) {
		t.Fatalf("the confirmation: %d\n%s", code, body)
	}
	if a, err := rollout.AccountOf(t.Context(), js, id); err != nil || a.Control.State == events.StatePaused {
		t.Fatalf("the confirmation page paused the rollout (%v)", err)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/act/pause/"+id, strings.NewReader(url.Values{"reason": {"looks wrong"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-origin POST answered %d, want 403", resp.StatusCode)
	}

	resp, err = noRedirect.PostForm(base+"/act/pause/"+id, url.Values{"reason": {"looks wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "/rollouts/"+id+"?done=") {
		t.Errorf("the pause answered %d, Location %q", resp.StatusCode, loc)
	}
	a, err := rollout.AccountOf(t.Context(), js, id)
	if err != nil || a.Control.State != events.StatePaused || a.Control.Reason != "looks wrong" || !strings.HasPrefix(a.Control.By, "tester from ") {
		t.Errorf("after the pause: %+v, %v", a.Control, err)
	}
	// The page the pause redirects to says what it did; a link carrying a
	// note of its own (from another site, say) makes the page say nothing
	// (issue 59, item 10).
	if _, body := get(t, http.DefaultClient, base+resp.Header.Get("Location")); !strings.Contains(body, `id="done"`) {
		t.Errorf("the page after the pause shows no note of it:\n%s", body)
	}
	forged := base + "/rollouts/" + id + "?" + url.Values{"done": {"Rollout approved by the platform team"}, "seal": {"x"}}.Encode()
	if _, body := get(t, http.DefaultClient, forged); strings.Contains(body, "approved by the platform team") {
		t.Errorf("a link's own note is shown on the rollout's page:\n%s", body)
	}
}

// TestReadOnlyHasNoButtons: a read-only dashboard shows no button and
// refuses the actions, saying why.
func TestReadOnlyHasNoButtons(t *testing.T) {
	js := testenv.JetStream(t)
	id := recorded(t, js)
	base := serve(t, js, Config{ReadOnly: true})
	_, body := get(t, http.DefaultClient, base+"/rollouts/"+id)
	if strings.Contains(body, `id="action-`) || !strings.Contains(body, `id="readonly"`) {
		t.Errorf("a read-only page:\n%s", body)
	}
	for _, path := range []string{"/act/pause/" + id, "/act/undo/" + id} {
		if code, body := get(t, http.DefaultClient, base+path); code != http.StatusForbidden || !strings.Contains(body, "only reads") {
			t.Errorf("GET %s: %d\n%s", path, code, body)
		}
	}
	resp, err := http.PostForm(base+"/act/abort/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST abort on a read-only dashboard: %d", resp.StatusCode)
	}
}

// TestTheTokenGuardsEveryPage: with a token, a request without it is 401;
// a visit with ?token= sets the cookie and drops the token from the
// address; the cookie or a bearer header lets the pages through.
func TestTheTokenGuardsEveryPage(t *testing.T) {
	js := testenv.JetStream(t)
	base := serve(t, js, Config{Token: "s3cret"})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/", "/assets/htmx.min.js", "/live/rollouts", "/nowhere"} {
		if code, _ := get(t, noRedirect, base+path); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d", path, code)
		}
	}
	if code, _ := get(t, noRedirect, base+"/?token=wrong"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", code)
	}
	resp, err := noRedirect.Get(base + "/drift?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/drift" || len(cookies) != 1 || !cookies[0].HttpOnly {
		t.Fatalf("the visit with the token: %d, Location %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	if code, _ := get(t, noRedirect, base+"/drift", "Cookie", cookies[0].Name+"="+cookies[0].Value); code != http.StatusOK {
		t.Errorf("with the cookie: %d", code)
	}
	if code, _ := get(t, noRedirect, base+"/", "Authorization", "Bearer s3cret"); code != http.StatusOK {
		t.Errorf("with the bearer header: %d", code)
	}
}

// TestALivePageFollowsTheRecords: a rollout's live feed sends its part at
// once, then again when an outcome of it is stored, with the new VM.
func TestALivePageFollowsTheRecords(t *testing.T) {
	js := testenv.JetStream(t)
	id := recorded(t, js)
	base := serve(t, js, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/live/rollout/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	feed := bufio.NewReader(resp.Body)
	first := nextEvent(t, feed)
	if !strings.Contains(first, "shop/vm-a") || strings.Contains(first, "shop/vm-b") {
		t.Fatalf("the first event:\n%s", first)
	}
	outcome(t, js, id, "vm-b", events.ResultLive, 1)
	for {
		next := nextEvent(t, feed)
		if strings.Contains(next, "shop/vm-b") {
			return
		}
	}
}

// TestLivePagesShareOneRenderAndAStalledOneIsClosed: three pages open on
// one rollout are read and rendered once for all of them, at the start and
// after a change; a fourth that takes nothing (a stalled reader) holds
// none of them back and is closed once it has taken nothing for the
// write timeout.
func TestLivePagesShareOneRenderAndAStalledOneIsClosed(t *testing.T) {
	js := testenv.JetStream(t)
	id := recorded(t, js)
	metrics := telemetry.New()
	d, base := started(t, js, Config{Metrics: metrics})
	d.writeTimeout = 500 * time.Millisecond
	stalled := &stalledWriter{header: http.Header{}, release: make(chan struct{})}
	defer close(stalled.release)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/live/rollout/"+id, nil)
		req.Host = "127.0.0.1"
		d.Handler().ServeHTTP(stalled, req)
	}()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var feeds []*bufio.Reader
	for range 3 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/live/rollout/"+id, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		feed := bufio.NewReader(resp.Body)
		if first := nextEvent(t, feed); !strings.Contains(first, "shop/vm-a") {
			t.Fatalf("the first event:\n%s", first)
		}
		feeds = append(feeds, feed)
	}
	outcome(t, js, id, "vm-b", events.ResultLive, 1)
	for _, feed := range feeds {
		for moved := false; !moved; {
			moved = strings.Contains(nextEvent(t, feed), "shop/vm-b")
		}
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled page is still open 30s after its write timeout")
	}
	if closed := closedPages(t, metrics); closed != 1 {
		t.Errorf("kvlive_dashboard_pages_closed_total = %v, want 1 (the stalled page)", closed)
	}
	if renders := d.renders.Load(); renders > 2 {
		t.Errorf("the rollout's part was rendered %d times for four pages and one change; want once at the start and once after the change", renders)
	}
}

// closedPages reads kvlive_dashboard_pages_closed_total from m.
func closedPages(t *testing.T, m *telemetry.Metrics) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "kvlive_dashboard_pages_closed_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no kvlive_dashboard_pages_closed_total")
	return 0
}

// stalledWriter is a page that takes nothing: a write waits until the
// write deadline (for ever when none is set, until release) and fails.
type stalledWriter struct {
	header   http.Header
	release  chan struct{}
	mu       sync.Mutex
	deadline time.Time
}

func (w *stalledWriter) Header() http.Header { return w.header }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Flush()              {}

func (w *stalledWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = t
	return nil
}

func (w *stalledWriter) Write([]byte) (int, error) {
	w.mu.Lock()
	d := w.deadline
	w.mu.Unlock()
	wait := make(<-chan time.Time)
	if !d.IsZero() {
		wait = time.After(time.Until(d))
	}
	select {
	case <-wait:
	case <-w.release:
	}
	return 0, os.ErrDeadlineExceeded
}

// nextEvent reads one server-sent event's data, comments skipped.
func nextEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the live feed: %v (so far %q)", err, b.String())
		}
		switch {
		case line == "\n" && b.Len() > 0:
			return b.String()
		case strings.HasPrefix(line, "data: "):
			b.WriteString(strings.TrimPrefix(line, "data: "))
		}
	}
}

// TestSubjectPermissions: NATS's allow and deny lists, as the dashboard
// reads them to decide on its buttons.
func TestSubjectPermissions(t *testing.T) {
	for _, c := range []struct {
		allow, deny []string
		want        bool
	}{
		{nil, nil, true},
		{[]string{"$KV.kvlive-rollout-control.>"}, nil, true},
		{[]string{"$KV.*.any"}, nil, true},
		{[]string{"$JS.API.>", "kvlive.events.>"}, nil, false},
		{[]string{">"}, []string{"$KV.kvlive-rollout-control.*"}, false},
		{nil, []string{"$KV.>"}, false},
		{[]string{"$KV.kvlive-rollout-control"}, nil, false},
	} {
		if got := allowed(c.allow, c.deny, controlSubject); got != c.want {
			t.Errorf("allow %v deny %v: %v, want %v", c.allow, c.deny, got, c.want)
		}
	}
}

// TestWithoutATokenOnlyLoopbackHostsAreAnswered: a dashboard without a
// token answers requests for localhost and loopback addresses, and refuses
// (421) those for any other host, as a page of another site would send
// after its DNS rebound to 127.0.0.1: neither its pages nor its actions,
// with the rollout left as it was. Issue 59, item 3.
func TestWithoutATokenOnlyLoopbackHostsAreAnswered(t *testing.T) {
	js := testenv.JetStream(t)
	id := recorded(t, js)
	base := serve(t, js, Config{By: "tester"})
	port := base[strings.LastIndex(base, ":")+1:]
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "127.0.0.2", "localhost."} {
		if code, _ := get(t, http.DefaultClient, base+"/", "Host", host); code != http.StatusOK {
			t.Errorf("GET / for host %q: %d, want 200", host, code)
		}
	}
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "127.0.0.1.nip.io", "localhost.attacker.example", "10.0.0.1"} {
		code, body := get(t, http.DefaultClient, base+"/rollouts/"+id, "Host", host)
		if code != http.StatusMisdirectedRequest || strings.Contains(body, "shop/vm-a") || !strings.Contains(body, "only requests for localhost") {
			t.Errorf("GET the rollout for host %q: %d, want 421 without the rollout\n%s", host, code, body)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/act/pause/"+id, strings.NewReader(url.Values{"reason": {"rebound"}}.Encode()))
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("POST pause for host %q: %d, want 421", host, resp.StatusCode)
		}
	}
	if a, err := rollout.AccountOf(t.Context(), js, id); err != nil || a.Control.State == events.StatePaused {
		t.Errorf("a rebound page paused the rollout: %+v, %v", a.Control, err)
	}
}

// TestTwoPromotePagesReleaseOneBatch: a promote's confirmation page names
// the batch it releases; two such pages confirmed one after the other
// release it once, and the second is told it was released meanwhile.
func TestTwoPromotePagesReleaseOneBatch(t *testing.T) {
	js := testenv.JetStream(t)
	id := recorded(t, js)
	base := serve(t, js, Config{By: "tester"})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	code, body := get(t, noRedirect, base+"/act/promote/"+id)
	if code != http.StatusOK || !strings.Contains(body, `name="batch" value="2"`) || !strings.Contains(body, "Release batch 2 of 2") {
		t.Fatalf("the promote's confirmation: %d\n%s", code, body)
	}
	var codes []int
	for range 2 {
		resp, err := noRedirect.PostForm(base+"/act/promote/"+id, url.Values{"batch": {"2"}})
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != http.StatusSeeOther || codes[1] != http.StatusConflict {
		t.Errorf("two promotes of batch 2 answered %v, want [303 409]", codes)
	}
	if a, err := rollout.AccountOf(t.Context(), js, id); err != nil || a.Batch != 1 {
		t.Errorf("after two promotes the last released batch is %d, %v; want 2", a.Batch+1, err)
	}
}
