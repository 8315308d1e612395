//go:build integration

package integration

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/webhook"
	"kvlive/rollout"
)

// hookServer is a local HTTPS server playing an operator's webhooks: /yes
// answers 204, /no 403 with a reason, /late after any timeout, /hang
// never (until kvlive hangs up, counted in cancelled), /redirect a 302 to
// an auth proxy's /login page, which answers 200 (counted in logins); it
// keeps every CloudEvent it got.
type hookServer struct {
	*httptest.Server
	caFile            string
	mu                sync.Mutex
	calls             []webhook.Call
	cancelled, logins atomic.Int32
}

func startHookServer(t *testing.T) *hookServer {
	t.Helper()
	h := &hookServer{}
	mux := http.NewServeMux()
	keep := func(r *http.Request) {
		var ce struct {
			Data webhook.Call `json:"data"`
		}
		if json.NewDecoder(r.Body).Decode(&ce) == nil {
			h.mu.Lock()
			h.calls = append(h.calls, ce.Data)
			h.mu.Unlock()
		}
	}
	mux.HandleFunc("/yes", func(w http.ResponseWriter, r *http.Request) { keep(r); w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/no", func(w http.ResponseWriter, r *http.Request) {
		keep(r)
		http.Error(w, "change freeze", http.StatusForbidden)
	})
	mux.HandleFunc("/late", func(w http.ResponseWriter, r *http.Request) {
		keep(r)
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	done := make(chan struct{})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		keep(r)
		select {
		case <-r.Context().Done():
			h.cancelled.Add(1)
		case <-done:
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		keep(r)
		http.Redirect(w, r, "/login", http.StatusFound)
	})
	mux.HandleFunc("/login", func(w http.ResponseWriter, _ *http.Request) {
		h.logins.Add(1)
		_, _ = w.Write([]byte("sign in"))
	})
	h.Server = httptest.NewTLSServer(mux)
	t.Cleanup(func() { close(done); h.Close() })
	h.caFile = filepath.Join(t.TempDir(), "webhook-ca.pem")
	if err := os.WriteFile(h.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// got lists the calls of phase about eventID's batch (1-based).
func (h *hookServer) got(eventID, phase string, batch int) []webhook.Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []webhook.Call
	for _, c := range h.calls {
		if c.EventID == eventID && c.Phase == phase && c.Batch == batch {
			out = append(out, c)
		}
	}
	return out
}

// TestWebhookGatesHoldABatch runs two batched switches whose policies name
// webhooks on a local HTTPS server kvlive trusts by --webhook-ca-file. The
// first's confirm webhook says yes to its first batch, whose VMs move;
// its check webhook, asked with those VMs and KubeVirt's verdicts once the
// batch passed KubeVirt's gate, says no: the rollout pauses, rollout status
// saying what the webhook answered, the next batch unreleased, and the
// call is a span of the rollout's trace. The second's confirm webhook
// answers late: paused before anything moves.
func TestWebhookGatesHoldABatch(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itSmall: 4, itMedium: 2}})
	hooks := startHookServer(t)
	e.runKvlive("first", "--observe-timeout", "30s", "--webhook-ca-file", hooks.caFile, "--webhook-allow-host", "127.0.0.1")

	out := e.kvliveCommand(2*time.Minute, "switch", "--from", "clusterinstancetype/"+itSmall, "--to", "clusterinstancetype/"+itLarge, "-A",
		"--batch-size", "2", "--confirm-webhook", hooks.URL+"/yes", "--check-webhook", hooks.URL+"/no", "--webhook-timeout", "2s", "--yes",
		"--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	m := switched.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("switch printed no id:\n%s", out)
	}
	checked := m[1]
	e.waitFor("the check webhook's no to pause the switch", rolloutTimeout, func() (bool, string) {
		st := e.status(checked)
		return st.Control.State == events.StatePaused && strings.Contains(st.Control.Reason, "check webhook said no") &&
			strings.Contains(st.Control.Reason, "403 Forbidden: change freeze"), string(st.Control.State) + ": " + st.Control.Reason
	})
	st := e.status(checked)
	if n := len(e.outcomes(checked)); n != 2 || st.Batch != 0 {
		t.Errorf("%d VMs have an outcome, batch %d released; want the first batch's 2, the second unreleased", n, st.Batch+1)
	}
	if confirms := hooks.got(checked, webhook.PhaseConfirm, 1); len(confirms) == 0 || len(confirms[0].VMs) != 2 {
		t.Errorf("confirm calls about batch 1: %+v; want one naming its 2 VMs", confirms)
	}
	checks := hooks.got(checked, webhook.PhaseCheck, 1)
	if len(checks) == 0 || len(checks[0].VMs) != 2 {
		t.Fatalf("check calls about batch 1: %+v; want one naming its 2 VMs", checks)
	}
	for _, vm := range checks[0].VMs {
		if !vm.Result.Moves() || vm.Verdict == "" {
			t.Errorf("check call: %s/%s %s, verdict %q; want a moved VM with KubeVirt's verdict", vm.Namespace, vm.Name, vm.Result, vm.Verdict)
		}
	}
	e.waitFor("the confirm and check webhooks' spans in the rollout's trace", time.Minute, func() (bool, string) {
		tr, stderr, err := e.kvliveOnce(time.Minute, "trace", checked, "--nats-url", e.natsURL)
		return err == nil && strings.Contains(tr, "rollout.webhook confirm 1/2") && strings.Contains(tr, "rollout.webhook check 1/2"),
			"no span of each webhook call yet: " + stderr.String()
	})

	out = e.kvliveCommand(2*time.Minute, "switch", "--from", "clusterinstancetype/"+itMedium, "--to", "clusterinstancetype/"+itLarge, "-A",
		"--batch-size", "1", "--confirm-webhook", hooks.URL+"/late", "--webhook-timeout", "1s", "--yes",
		"--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if m = switched.FindStringSubmatch(out); m == nil {
		t.Fatalf("switch printed no id:\n%s", out)
	}
	late := m[1]
	e.waitFor("the late confirm webhook to pause the switch ahead", rolloutTimeout, func() (bool, string) {
		st := e.status(late)
		return st.Control.State == events.StatePaused && strings.Contains(st.Control.Reason, "no answer within 1s"), string(st.Control.State) + ": " + st.Control.Reason
	})
	if st := e.status(late); len(e.outcomes(late)) != 0 || st.Held == 0 {
		t.Errorf("late confirm: %d outcomes, %d plans held; want none moved, the first batch held", len(e.outcomes(late)), st.Held)
	}
}

// TestWebhooksThatHangOrRedirectHoldTheirOwnRolloutAlone: behind an auth
// proxy that redirects to its login page, a switch's confirm webhook is a
// no: paused, nothing moved, the login page never asked. A second switch's
// confirm webhook never answers (a timeout of minutes) while kvlive runs
// with two planner workers; an edit made meanwhile is rolled out all the
// same, each of its VMs written exactly once (audit log); the waiting
// switch says what it waits for, `rollout abort` ends it and kvlive hangs
// up on the webhook. Neither switch wrote a VM.
func TestWebhooksThatHangOrRedirectHoldTheirOwnRolloutAlone(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itSmall: 2, itMedium: 2, itLarge: 2}})
	hooks := startHookServer(t)
	e.runKvlive("first", "--observe-timeout", "30s", "--webhook-ca-file", hooks.caFile, "--webhook-allow-host", "127.0.0.1", "--planner-workers", "2")

	switchWith := func(from, hook string) string {
		out := e.kvliveCommand(2*time.Minute, "switch", "--from", "clusterinstancetype/"+from, "--to", "clusterinstancetype/"+itLarge, "-A",
			"--confirm-webhook", hooks.URL+hook, "--webhook-timeout", "4m", "--yes", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
		m := switched.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("switch printed no id:\n%s", out)
		}
		return m[1]
	}
	redirected := switchWith(itSmall, "/redirect")
	hung := switchWith(itMedium, "/hang")
	e.waitFor("the redirect to pause its switch", rolloutTimeout, func() (bool, string) {
		st := e.status(redirected)
		return st.Control.State == events.StatePaused && strings.Contains(st.Control.Reason, "302 Found: a redirect is a no"),
			string(st.Control.State) + ": " + st.Control.Reason
	})
	e.waitFor("the hanging webhook asked", time.Minute, func() (bool, string) {
		n := len(hooks.got(hung, webhook.PhaseConfirm, 1))
		return n > 0, plural(n, "call")
	})

	_, edited := e.editInstancetype(itLarge, 6, "12Gi")
	e.waitFor("the edit rolled out while a webhook hangs", rolloutTimeout, func() (bool, string) {
		st := e.status(edited)
		return st.Phase == rollout.PhaseComplete, string(st.Phase)
	})
	st := e.status(hung)
	if st.Control.State != events.StatePaused || !strings.Contains(st.Control.Reason, "awaiting its confirm webhook") {
		t.Errorf("the switch whose webhook hangs: %s %q; want paused, saying it awaits its webhook", st.Control.State, st.Control.Reason)
	}
	if out := e.rolloutCommand("abort", hung, "--reason", "the approver is away"); !strings.Contains(out, "aborted") {
		t.Errorf("rollout abort: %s", out)
	}
	e.waitFor("kvlive to hang up on the aborted switch's webhook", time.Minute, func() (bool, string) {
		return hooks.cancelled.Load() > 0, "still connected"
	})
	e.checkWrites(e.selectShapes(onInstancetype(itLarge)), append(e.selectShapes(onInstancetype(itSmall)), e.selectShapes(onInstancetype(itMedium))...))
	if n := hooks.logins.Load(); n != 0 {
		t.Errorf("the auth proxy's login page was asked %d times; want never", n)
	}
}
