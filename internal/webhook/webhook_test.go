package webhook_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/webhook"
)

// TestAskHearsYesNoLateAndGarbage asks a local HTTPS server, trusted by a
// CA file and requiring kvlive's client certificate, that answers yes
// (204), no (403 with a reason), late (after the timeout) and garbage (not
// HTTP at all): only the yes is one, and each answer says what came back.
// The server receives the batch as a CloudEvent.
func TestAskHearsYesNoLateAndGarbage(t *testing.T) {
	var got struct {
		ID   string       `json:"id"`
		Type string       `json:"type"`
		Data webhook.Call `json:"data"`
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/yes", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/cloudevents+json" {
			w.WriteHeader(http.StatusUnsupportedMediaType)
			return
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/no", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "change freeze until Monday", http.StatusForbidden)
	})
	mux.HandleFunc("/late", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writePEM(t, ca, "CERTIFICATE", srv.Certificate().Raw)
	cert, key := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	// The test server's own pair serves as kvlive's client certificate.
	writePEM(t, cert, "CERTIFICATE", srv.TLS.Certificates[0].Certificate[0])
	der, err := x509.MarshalPKCS8PrivateKey(srv.TLS.Certificates[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, key, "PRIVATE KEY", der)

	garbage, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: srv.TLS.Certificates})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = garbage.Close() })
	go func() {
		for {
			c, err := garbage.Accept()
			if err != nil {
				return
			}
			go func() {
				// Read the request's head, then answer with what no HTTP
				// client can read.
				_, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, "\x00\x01 this is not HTTP \xff\n\n")
				_ = c.Close()
			}()
		}
	}()

	c, err := webhook.New(webhook.TLS{CAFile: ca, CertFile: cert, KeyFile: key}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	call := webhook.Call{Phase: webhook.PhaseCheck, EventID: "switch/1", Batch: 2, Batches: 3,
		VMs: []webhook.VM{{Namespace: "ns", Name: "vm", UID: "u", Result: events.ResultLive, Verdict: events.ObservedLive}}}
	now := time.Now()
	garbageURL := "https://" + garbage.Addr().String() + "/hook"
	for _, tc := range []struct {
		url  string
		yes  bool
		says string
	}{
		{srv.URL + "/yes", true, "204 No Content"},
		{srv.URL + "/no", false, "403 Forbidden: change freeze until Monday"},
		{srv.URL + "/late", false, "no answer within 500ms"},
		{garbageURL, false, "malformed HTTP"},
	} {
		a := c.Ask(t.Context(), tc.url, 500*time.Millisecond, call, now)
		if a.Yes() != tc.yes || !strings.Contains(a.String(), tc.says) || (tc.url == garbageURL && (a.Status != 0 || a.Error == "")) {
			t.Errorf("%s: yes %t, %q; want yes %t saying %q", tc.url, a.Yes(), a.String(), tc.yes, tc.says)
		}
	}
	if got.ID != "switch/1/batch/2/check" || got.Type != "io.kvlive.rollout.batch.check.v1" || len(got.Data.VMs) != 1 || got.Data.VMs[0].Verdict != events.ObservedLive {
		t.Errorf("the webhook got %+v; want the check of batch 2 as a CloudEvent with its VM and verdict", got)
	}

	// Without the CA, the server is not trusted; without a certificate,
	// the server refuses kvlive.
	untrusting, err := webhook.New(webhook.TLS{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if a := untrusting.Ask(t.Context(), srv.URL+"/yes", time.Second, call, now); a.Yes() || !strings.Contains(a.Error, "certificate") {
		t.Errorf("without the CA: %q, want a certificate error", a)
	}
	if _, err := webhook.New(webhook.TLS{CertFile: cert}); err == nil {
		t.Error("a client certificate without its key was accepted")
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAskRefusesRedirects asks a webhook behind an auth proxy that answers
// every call with a 302 to its login page, which answers 200: the gate
// hears no, named as a redirect with the host it led to (no path: it may
// carry a secret as the hook's own does), and the login page is
// never requested (a redirect would make kvlive call any address it names).
func TestAskRefusesRedirects(t *testing.T) {
	var followed int
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/login", http.StatusFound)
	})
	mux.HandleFunc("/login", func(w http.ResponseWriter, _ *http.Request) {
		followed++
		_, _ = io.WriteString(w, "please sign in")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := webhook.New(webhook.TLS{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		mux := http.NewServeMux()
		mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, srv.URL+"/login", code) })
		hook := httptest.NewServer(mux)
		a := c.Ask(t.Context(), hook.URL+"/hook", time.Second, webhook.Call{Phase: webhook.PhaseConfirm, EventID: "e", Batch: 1, Batches: 1}, time.Now())
		hook.Close()
		if a.Yes() || a.Status != code || !strings.Contains(a.String(), "a redirect is a no") || !strings.Contains(a.String(), srv.URL+"/…") ||
			strings.Contains(a.String(), "/login") || strings.Contains(a.String(), "/hook") {
			t.Errorf("%d to the login page: yes %t, %q; want a no naming the redirect and the host it led to, no path", code, a.Yes(), a)
		}
	}
	if followed != 0 {
		t.Errorf("the login page was asked %d times; want never", followed)
	}
}

// TestRedactHidesCredentials: a webhook URL's user info, path and query
// never reach a log, a span or a rollout's status: a chat hook's secret is
// its path (issue 59, item 2).
func TestRedactHidesCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"https://ops:s3cret@hooks.example/confirm?token=abc&team=x":           "https://hooks.example/…",
		"https://hooks.example/confirm":                                       "https://hooks.example/…",
		"https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX": "https://hooks.slack.com/…",
		"https://discord.com/api/webhooks/123/s3cret-token/slack":             "https://discord.com/…",
		"https://chat.example:8065/hooks/xxxgenerateds3cretxxx":               "https://chat.example:8065/…",
		"http://gate.example:9000":                                            "http://gate.example:9000",
		"http://gate.example:9000/":                                           "http://gate.example:9000",
		"http://gate.example/?sig=abc":                                        "http://gate.example/…",
		"http://[::1:bad":                                                     "(a webhook URL that does not parse)",
		"hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX":         "(a webhook URL that does not parse)",
	} {
		if got := webhook.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAskRefusesWhatOnlyKvlivesHostReaches: a webhook on a loopback or
// link-local address (kvlive's own metrics port, a cloud metadata service)
// is refused before anything is sent, saying which flag allows it; once
// allowed, it is asked.
func TestAskRefusesWhatOnlyKvlivesHostReaches(t *testing.T) {
	var asked int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { asked++ }))
	t.Cleanup(srv.Close)
	strict, err := webhook.New(webhook.TLS{})
	if err != nil {
		t.Fatal(err)
	}
	call := webhook.Call{Phase: webhook.PhaseConfirm, EventID: "e", Batch: 1, Batches: 1}
	for url, says := range map[string]string{
		srv.URL + "/hook":                   "is a loopback address; kvlive run --webhook-allow-host 127.0.0.1 allows it",
		"http://169.254.169.254/latest/api": "is a link-local address",
		"http://[::1]:1/hook":               "is a loopback address",
	} {
		if a := strict.Ask(t.Context(), url, time.Second, call, time.Now()); a.Yes() || !strings.Contains(a.Error, says) {
			t.Errorf("%s: %q; want refused: %q", url, a, says)
		}
	}
	if asked != 0 {
		t.Errorf("the loopback webhook was asked %d times; want never", asked)
	}
	allowing, err := webhook.New(webhook.TLS{}, "127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	if a := allowing.Ask(t.Context(), srv.URL+"/hook", time.Second, call, time.Now()); !a.Yes() || asked != 1 {
		t.Errorf("allowed by 127.0.0.0/8: %q, asked %d times; want a yes", a, asked)
	}
	if _, err := webhook.New(webhook.TLS{}, "https://hooks.example/"); err == nil {
		t.Error("a URL as an allowed host was taken")
	}
}

// TestPermitsOnlyTheHostsTheOperatorAllowed: a namespaced object's policy
// may name a webhook only on a host the operator allowed, by name, address
// or prefix.
func TestPermitsOnlyTheHostsTheOperatorAllowed(t *testing.T) {
	c, err := webhook.New(webhook.TLS{}, "gate.example", "10.1.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for url, ok := range map[string]bool{
		"https://gate.example/confirm":        true,
		"https://GATE.example:8443/check":     true,
		"https://10.1.2.3/check":              true,
		"https://other.example/confirm":       false,
		"https://10.2.0.1/check?token=s3cr3t": false,
	} {
		err := c.Permits(url)
		if ok != (err == nil) || (!ok && (!errors.Is(err, webhook.ErrNotAllowed) || strings.Contains(err.Error(), "s3cr3t"))) {
			t.Errorf("Permits(%s) = %v; want allowed %t (and the URL redacted)", url, err, ok)
		}
	}
}
