package notify

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strings"

	"kvlive/events"
	"kvlive/internal/webhook"
)

// Receiver formats.
const (
	// FormatCloudEvents posts the notification as stored: a CloudEvent in
	// structured mode (application/cloudevents+json).
	FormatCloudEvents = "cloudevents"
	// FormatSlack posts {"text": …}, which Slack's incoming webhooks and
	// the chat tools compatible with them (Mattermost, Rocket.Chat,
	// Discord's /slack endpoint) take.
	FormatSlack = "slack"
)

// Receiver is one --notify target.
type Receiver struct {
	URL    string
	Format string
	// Header is added to every post (an Authorization the receiver wants).
	Header http.Header
}

// ParseReceiver reads a --notify value: URL[;format=slack|cloudevents]
// [;headers=FILE]. The format is slack for hooks.slack.com and cloudevents
// otherwise, unless named; FILE holds header lines ("Name: value"), so a
// receiver's secret stays off the command line.
func ParseReceiver(spec string) (Receiver, error) {
	parts := strings.Split(spec, ";")
	u, err := url.Parse(parts[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Receiver{}, fmt.Errorf("--notify %s: want an http(s) URL, then ;format=slack|cloudevents or ;headers=FILE", webhook.Redact(parts[0]))
	}
	r := Receiver{URL: parts[0], Format: FormatCloudEvents}
	if u.Hostname() == "hooks.slack.com" {
		r.Format = FormatSlack
	}
	for _, opt := range parts[1:] {
		key, value, _ := strings.Cut(opt, "=")
		switch key {
		case "format":
			if value != FormatSlack && value != FormatCloudEvents {
				return Receiver{}, fmt.Errorf("--notify %s: format %q: want slack or cloudevents", webhook.Redact(r.URL), value)
			}
			r.Format = value
		case "headers":
			if r.Header, err = readHeaders(value); err != nil {
				return Receiver{}, fmt.Errorf("--notify %s: %w", webhook.Redact(r.URL), err)
			}
		default:
			return Receiver{}, fmt.Errorf("--notify %s: unknown option %q (want format= or headers=)", webhook.Redact(r.URL), key)
		}
	}
	return r, nil
}

// readHeaders reads "Name: value" lines; blank lines and # comments are
// skipped.
func readHeaders(file string) (http.Header, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	h := http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("headers: %s:%d: want Name: value", file, n)
		}
		h.Add(textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)), strings.TrimSpace(value))
	}
	return h, sc.Err()
}

// String names the receiver as logs and consumer descriptions do: its URL
// redacted, and its format.
func (r Receiver) String() string { return webhook.Redact(r.URL) + " (" + r.Format + ")" }

// consumerName is the receiver's durable consumer: the same for every
// replica and restart given the same URL and format.
func (r Receiver) consumerName() string {
	sum := sha256.Sum256([]byte(r.Format + " " + r.URL))
	return "notify-" + hex.EncodeToString(sum[:6])
}

// body is what the receiver is posted, and its content type.
func (r Receiver) body(stored []byte, n events.Notification) ([]byte, string, error) {
	if r.Format == FormatCloudEvents {
		return stored, "application/cloudevents+json", nil
	}
	var text strings.Builder
	text.WriteString(n.Text)
	if n.Why != "" {
		text.WriteString("\n> " + n.Why)
	}
	for _, c := range n.Commands {
		text.WriteString("\n`" + c + "`")
	}
	if n.Link != "" {
		text.WriteString("\n<" + n.Link + "|Open it in the kvlive dashboard>")
	}
	b, err := json.Marshal(map[string]string{"text": text.String()})
	if err != nil {
		return nil, "", errors.New("slack body: " + err.Error())
	}
	return b, "application/json", nil
}
