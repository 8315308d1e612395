// Package webhook asks an operator's HTTP(S) endpoint whether a rollout's
// batch may go (confirm, before it is released) or did well (check, after
// KubeVirt's gate passed it), as Argo Rollouts' analysis and Flagger's
// hooks do: a POST of a CloudEvent naming the batch's VMs, their results
// and KubeVirt's verdicts; a 2xx answer says yes, anything else (another
// status, no answer within the timeout, a reply that is not HTTP) says no.
// A redirect is not followed: it is a no, naming where it led (an auth
// proxy's 302 to its login page is not an operator's yes, and a webhook URL
// must not make kvlive call whatever address a redirect names).
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"kvlive/events"
)

// Phases of a batch a webhook is asked at.
const (
	PhaseConfirm = "confirm"
	PhaseCheck   = "check"
)

// DefaultTimeout bounds a call whose policy sets no webhookTimeout.
const DefaultTimeout = 10 * time.Second

// maxAnswer is how much of an answer's body is read and recorded.
const maxAnswer = 1024

// Call is what a webhook is told: the rollout, the batch and its VMs.
type Call struct {
	Phase   string     `json:"phase"`
	EventID string     `json:"eventId"`
	Object  events.Ref `json:"object"`
	// Batch counts from 1, of Batches.
	Batch   int  `json:"batch"`
	Batches int  `json:"batches"`
	VMs     []VM `json:"vms"`
}

// VM is one VM of the batch: its planned result (confirm) or its outcome
// and KubeVirt's verdict on it (check).
type VM struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	UID       string          `json:"uid"`
	Result    events.Result   `json:"result,omitempty"`
	Verdict   events.Observed `json:"verdict,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

// Answer is what the webhook answered.
type Answer struct {
	// URL is the webhook's, redacted (Redact): it is recorded in logs,
	// spans and the rollout's control record.
	URL    string `json:"url"`
	Status int    `json:"status,omitempty"`
	// Location is where a redirect (3xx) led; it was not followed.
	Location string        `json:"location,omitempty"`
	Body     string        `json:"body,omitempty"`
	Error    string        `json:"error,omitempty"`
	Took     time.Duration `json:"took"`
}

// Yes reports a 2xx answer.
func (a Answer) Yes() bool { return a.Error == "" && a.Status >= 200 && a.Status < 300 }

// String says what the webhook answered, as a rollout's status shows it.
func (a Answer) String() string {
	if a.Error != "" {
		return a.URL + ": " + a.Error
	}
	s := fmt.Sprintf("%s: %d %s", a.URL, a.Status, http.StatusText(a.Status))
	if a.Status >= 300 && a.Status < 400 {
		s += ": a redirect is a no (not followed"
		if a.Location != "" {
			s += ", to " + a.Location
		}
		s += ")"
	}
	if body := strings.TrimSpace(a.Body); body != "" {
		s += ": " + body
	}
	return s
}

// Client calls webhooks over HTTP or HTTPS, verifying servers against the
// system's roots or a CA bundle, and presenting a client certificate when
// one is configured.
type Client struct {
	transport *http.Transport
	allow     allowList
}

// TLS names the PEM files a Client uses; all are optional.
type TLS struct {
	// CAFile verifies webhook servers (instead of the system's roots).
	CAFile string
	// CertFile and KeyFile are the client certificate kvlive presents.
	CertFile, KeyFile string
}

// New builds a Client, reading the files t names. allowed are the hosts
// (names, IP addresses or CIDR prefixes) the operator allows beyond the
// default: loopback, link-local and kvlive's own host's addresses are
// refused unless allowed, and a policy from a namespaced object may name
// only allowed hosts (Permits).
func New(t TLS, allowed ...string) (*Client, error) {
	allow, err := parseAllowList(allowed)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("webhook: CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("webhook: CA file %s holds no PEM certificate", t.CAFile)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("webhook: a client certificate needs both its cert and its key file")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("webhook: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	tr.Proxy = nil // a proxy would connect for kvlive, past the address checks
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: allow.control}
	tr.DialContext = dialer.DialContext
	return &Client{transport: tr, allow: allow}, nil
}

// Ask posts call to url as a CloudEvent (id: the event, batch and phase,
// the same for every replica and attempt, so a receiver can tell a repeat)
// and returns the answer, within timeout (DefaultTimeout when zero).
func (c *Client) Ask(ctx context.Context, hook string, timeout time.Duration, call Call, now time.Time) Answer {
	body, err := json.Marshal(map[string]any{
		"specversion":     "1.0",
		"id":              fmt.Sprintf("%s/batch/%d/%s", call.EventID, call.Batch, call.Phase),
		"source":          "kvlive/rollout",
		"type":            "io.kvlive.rollout.batch." + call.Phase + ".v1",
		"subject":         call.EventID,
		"time":            now.UTC(),
		"datacontenttype": "application/json",
		"data":            call,
	})
	if err != nil {
		return Answer{URL: Redact(hook), Error: err.Error()}
	}
	return c.Post(ctx, hook, timeout, "application/cloudevents+json", nil, body)
}

// Post posts body to hook as contentType, with header's fields added, and
// returns the answer within timeout (DefaultTimeout when zero): the same
// transport, address checks and refusal of redirects as Ask.
func (c *Client) Post(ctx context.Context, hook string, timeout time.Duration, contentType string, header http.Header, body []byte) Answer {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	a := Answer{URL: Redact(hook)}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook, bytes.NewReader(body))
	if err != nil {
		a.Error = withoutURL(err)
		return a
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", contentType)
	start := time.Now()
	resp, err := (&http.Client{Transport: c.transport, CheckRedirect: noRedirects}).Do(req)
	a.Took = time.Since(start)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		a.Error = fmt.Sprintf("no answer within %s", timeout)
		return a
	case errors.Is(ctx.Err(), context.Canceled):
		a.Error = "not waited for: the call was cancelled (" + context.Cause(ctx).Error() + ")"
		return a
	case err != nil:
		a.Error = withoutURL(err)
		return a
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	a.Status, a.Body = resp.StatusCode, string(b)
	if a.Status >= 300 && a.Status < 400 {
		a.Location = Redact(resp.Header.Get("Location"))
		if u, err := resp.Location(); err == nil {
			a.Location = Redact(u.String())
		}
	}
	return a
}

// Redact names a webhook URL for whoever reads logs, consumer
// descriptions, dead letters and rollout status (the reader role too): its
// scheme and host only. A Slack, Mattermost or Discord incoming-webhook URL
// carries its secret in the path, a signed URL in the query, so both are
// shown as "/…", and user info is dropped. What does not parse is hidden
// whole.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "(a webhook URL that does not parse)"
	}
	s := u.Scheme + "://" + u.Host
	if strings.Trim(u.EscapedPath(), "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		s += "/…"
	}
	return s
}

// withoutURL is err's text without the URL it may carry: the HTTP
// client's errors quote the whole URL ("Post \"https://…\": …").
func withoutURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "the request could not be made"
}

// noRedirects makes the client hand a redirect back as the answer.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
