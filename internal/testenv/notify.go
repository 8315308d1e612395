package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"kvlive/events"
)

// How a NotifyReceiver answers.
const (
	// ReceiverOK takes a notification: 200, once it has checked it is one.
	ReceiverOK = "ok"
	// ReceiverRedirect answers 302 to a login page.
	ReceiverRedirect = "redirect"
	// ReceiverSlow answers after 12 s, past kvlive's 10 s post timeout.
	ReceiverSlow = "slow"
	// ReceiverDown answers 503.
	ReceiverDown = "down"
)

// NotifyReceiver is a local receiver of kvlive's notifications (kvlive
// run --notify, as CloudEvents): it keeps, in the order they came, the ones
// it took, and answers as its mode says. It fails the test on a post that
// is not a notification.
type NotifyReceiver struct {
	mu    sync.Mutex
	mode  string
	took  []events.Notification
	ids   []string
	tries int
	srv   *httptest.Server
}

// NewNotifyReceiver starts a receiver in mode until the test ends.
func NewNotifyReceiver(t testing.TB, mode string) *NotifyReceiver {
	r := &NotifyReceiver{mode: mode}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.tries++
		mode := r.mode
		r.mu.Unlock()
		switch mode {
		case ReceiverRedirect:
			http.Redirect(w, req, "https://login.example/", http.StatusFound)
			return
		case ReceiverSlow:
			time.Sleep(12 * time.Second)
			return
		case ReceiverDown:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		env, err := events.Parse(body)
		if err != nil || req.Header.Get("Content-Type") != "application/cloudevents+json" {
			t.Errorf("the receiver was posted %s %q: %v", req.Header.Get("Content-Type"), body, err)
			return
		}
		var n events.Notification
		if err := env.Into(&n); err != nil {
			t.Error(err)
			return
		}
		r.mu.Lock()
		r.took, r.ids = append(r.took, n), append(r.ids, env.ID)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is where the receiver listens.
func (r *NotifyReceiver) URL() string { return r.srv.URL }

// Set changes how the receiver answers from now on.
func (r *NotifyReceiver) Set(mode string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = mode
}

// Took is the notifications taken, in order.
func (r *NotifyReceiver) Took() []events.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.took)
}

// Kinds are the kinds of the notifications taken, in order.
func (r *NotifyReceiver) Kinds() []string {
	var out []string
	for _, n := range r.Took() {
		out = append(out, n.Kind)
	}
	return out
}

// IDs are the CloudEvents ids of the notifications taken, in order.
func (r *NotifyReceiver) IDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// Tries counts the posts so far, taken or not.
func (r *NotifyReceiver) Tries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tries
}
