//go:build integration

package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/rollout"
)

// notifyReceiver is a local receiver of kvlive's notifications: it keeps,
// in the order they came, the ones it took (answered 200 in time), and
// answers as its mode says.
type notifyReceiver struct {
	mu    sync.Mutex
	mode  string // "ok", "redirect", "slow" (past kvlive's 10 s), "down" (503)
	took  []events.Notification
	ids   []string
	tries int
	srv   *httptest.Server
}

func newNotifyReceiver(t *testing.T) *notifyReceiver {
	r := &notifyReceiver{mode: "ok"}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.tries++
		mode := r.mode
		r.mu.Unlock()
		switch mode {
		case "redirect":
			http.Redirect(w, req, "https://login.example/", http.StatusFound)
			return
		case "slow":
			time.Sleep(12 * time.Second)
			return
		case "down":
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

func (r *notifyReceiver) set(mode string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = mode
}

// kinds are the kinds of the notifications taken, in order.
func (r *notifyReceiver) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.took {
		out = append(out, n.Kind)
	}
	return out
}

// triesNow counts the posts so far.
func (r *notifyReceiver) triesNow() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tries
}

// TestNotificationsAcrossAKill: kvlive run --notify tells a local receiver
// of a batched rollout's start and of its gate holding the second batch
// (why, the promote command and the dashboard link). The receiver then
// redirects, answers too slowly and goes down while the rollout is
// promoted and completes (the pipeline does not wait for it), and kvlive
// is killed with SIGKILL; once the receiver is back and kvlive restarted,
// the completion arrives: started, held, completed, in that order, each
// once.
func TestNotificationsAcrossAKill(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 20}})
	r := newNotifyReceiver(t)
	flags := []string{"--notify", r.srv.URL, "--webhook-allow-host", "127.0.0.1", "--dashboard-url", "https://kvlive.example/"}
	first := e.runKvlive("first", append(flags, "--dashboard-addr", "127.0.0.1:0")...)
	e.waitGenerations()

	e.annotate(itMedium, "batchSize: 50%\npause: manual\n")
	_, id := e.editInstancetype(itMedium, 3, "6Gi")
	e.waitFor("the start and the held gate told", rolloutTimeout, func() (bool, string) {
		got := r.kinds()
		return slices.Equal(got, []string{events.NotifyStarted, events.NotifyHeld}), strings.Join(got, ", ")
	})
	r.mu.Lock()
	held := r.took[1]
	r.mu.Unlock()
	if !strings.Contains(held.Why, "batch 1 of 2 passed its gate") || !slices.Contains(held.Commands, "kvlive rollout promote "+id) ||
		held.Link != "https://kvlive.example/rollouts/"+id {
		t.Errorf("the held gate's notification: %+v", held)
	}

	// kvlive run serves the dashboard too, drift from the pipeline's cache.
	dash := regexp.MustCompile(`serving the dashboard".* url=(\S+)/ `).FindStringSubmatch(first.out.String())
	if dash == nil {
		t.Fatalf("kvlive run --dashboard-addr logged no dashboard address")
	}
	if code, body, err := httpGet(dash[1] + "/rollouts/" + id); err != nil || code != http.StatusOK || !strings.Contains(body, "passed its gate") {
		t.Errorf("kvlive run's dashboard, the rollout's page: %d, %v\n%s", code, err, body)
	}
	if code, body, err := httpGet(dash[1] + "/drift"); err != nil || code != http.StatusOK || !strings.Contains(body, itMedium) {
		t.Errorf("kvlive run's dashboard, drift: %d, %v\n%s", code, err, body)
	}

	// The receiver misbehaves; the rollout goes on without it.
	r.set("redirect")
	tries := r.triesNow()
	e.rolloutCommand("promote", id)
	e.waitFor("a redirected post", time.Minute, func() (bool, string) { return r.triesNow() > tries, "" })
	r.set("slow")
	tries = r.triesNow()
	e.waitFor("a post the receiver answers too late", time.Minute, func() (bool, string) { return r.triesNow() > tries, "" })
	r.set("down")
	if p := e.follow(id); p.Counts()[events.ResultLive]+p.Counts()[events.ResultRestart]+p.Counts()[events.ResultNextBoot] != 20 {
		t.Errorf("the rollout, its receiver down: %v", p.Counts())
	}
	e.waitFor("the rollout to complete, its receiver down", rolloutTimeout, func() (bool, string) {
		st := e.status(id)
		return st.Phase == rollout.PhaseComplete, string(st.Phase)
	})
	tries = r.triesNow()
	e.waitFor("a post to the receiver while down", time.Minute, func() (bool, string) { return r.triesNow() > tries, "" })
	first.kill()

	r.set("ok")
	e.runKvlive("second", flags...)
	e.waitFor("the completion told", rolloutTimeout, func() (bool, string) {
		got := r.kinds()
		return len(got) >= 3, strings.Join(got, ", ")
	})
	time.Sleep(3 * time.Second) // a notification told twice would come by now
	if got := r.kinds(); !slices.Equal(got, []string{events.NotifyStarted, events.NotifyHeld, events.NotifyCompleted}) {
		t.Errorf("told %v, want started, held, completed, once each", got)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ids := slices.Compact(slices.Sorted(slices.Values(r.ids))); len(ids) != len(r.ids) {
		t.Errorf("a notification was taken twice: %v", r.ids)
	}
}
