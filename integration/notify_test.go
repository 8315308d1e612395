//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// TestNotificationsAcrossAKill: kvlive run --notify tells a local receiver
// of a batched rollout's start and of its gate holding the second batch
// (why, the promote command and the dashboard link). kvlive is then killed
// with SIGKILL, and while it is down an operator promotes the rollout,
// pauses it and resumes it. A second kvlive tells of that pause, though it
// was lifted before any notifier saw it, to a receiver that redirects,
// answers too slowly and goes down while the rollout completes (the
// pipeline does not wait for it); that kvlive is killed too. Once the
// receiver is back and a third kvlive runs, the completion arrives:
// started, held, paused (lifted since), completed, in that order, each
// once.
func TestNotificationsAcrossAKill(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 20}})
	r := testenv.NewNotifyReceiver(t, testenv.ReceiverOK)
	flags := []string{"--notify", r.URL(), "--webhook-allow-host", "127.0.0.1", "--dashboard-url", "https://kvlive.example/"}
	first := e.runKvlive("first", append(flags, "--dashboard-addr", "127.0.0.1:0")...)
	e.waitGenerations()

	e.annotate(itMedium, "batchSize: 50%\npause: manual\n")
	_, id := e.editInstancetype(itMedium, 3, "6Gi")
	e.waitFor("the start and the held gate told", rolloutTimeout, func() (bool, string) {
		got := r.Kinds()
		return slices.Equal(got, []string{events.NotifyStarted, events.NotifyHeld}), strings.Join(got, ", ")
	})
	held := r.Took()[1]
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

	first.kill()
	e.rolloutCommand("promote", id)
	e.rolloutCommand("pause", id, "--reason", "while kvlive is down")
	e.rolloutCommand("resume", id)

	// The receiver misbehaves; the rollout goes on without it.
	r.Set(testenv.ReceiverRedirect)
	tries := r.Tries()
	second := e.runKvlive("second", flags...)
	e.waitFor("a redirected post", time.Minute, func() (bool, string) { return r.Tries() > tries, "" })
	r.Set(testenv.ReceiverSlow)
	tries = r.Tries()
	e.waitFor("a post the receiver answers too late", time.Minute, func() (bool, string) { return r.Tries() > tries, "" })
	r.Set(testenv.ReceiverDown)
	if p := e.follow(id); p.Counts()[events.ResultLive]+p.Counts()[events.ResultRestart]+p.Counts()[events.ResultNextBoot] != 20 {
		t.Errorf("the rollout, its receiver down: %v", p.Counts())
	}
	e.waitFor("the rollout to complete, its receiver down", rolloutTimeout, func() (bool, string) {
		st := e.status(id)
		return st.Phase == rollout.PhaseComplete, string(st.Phase)
	})
	tries = r.Tries()
	e.waitFor("a post to the receiver while down", time.Minute, func() (bool, string) { return r.Tries() > tries, "" })
	second.kill()

	r.Set(testenv.ReceiverOK)
	e.runKvlive("third", flags...)
	e.waitFor("the pause and the completion told", rolloutTimeout, func() (bool, string) {
		got := r.Kinds()
		return len(got) >= 4, strings.Join(got, ", ")
	})
	// Only a notification not yet acknowledged is posted again: once the
	// receiver's consumer has none left, unacknowledged or to deliver,
	// what it took is all it will take.
	e.waitFor("every notification posted and acknowledged", time.Minute, e.notificationsDone)
	if got := r.Kinds(); !slices.Equal(got, []string{events.NotifyStarted, events.NotifyHeld, events.NotifyPaused, events.NotifyCompleted}) {
		t.Errorf("told %v, want started, held, paused, completed, once each", got)
	} else if p := r.Took()[2]; p.Why != "while kvlive is down" || !strings.Contains(p.Text, "a pause lifted since") {
		t.Errorf("the pause made and lifted while kvlive was down: %+v", p)
	}
	if ids := r.IDs(); len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
		t.Errorf("a notification was taken twice: %v", ids)
	}
}

// notificationsDone reports whether every receiver's durable consumer of
// the notifications stream has delivered every notification and holds none
// unacknowledged, and which have not when not.
func (e *env) notificationsDone() (bool, string) {
	s, err := e.js.Stream(e.ctx, events.StreamNotify)
	if err != nil {
		return false, err.Error()
	}
	var left []string
	receivers := 0
	consumers := s.ListConsumers(e.ctx)
	for c := range consumers.Info() {
		if !strings.HasPrefix(c.Name, "notify-") {
			continue
		}
		receivers++
		if c.NumPending > 0 || c.NumAckPending > 0 {
			left = append(left, fmt.Sprintf("%s: %d to deliver, %d unacknowledged", c.Name, c.NumPending, c.NumAckPending))
		}
	}
	if err := consumers.Err(); err != nil {
		return false, err.Error()
	}
	if receivers == 0 {
		return false, "no receiver's consumer on the notifications stream"
	}
	return len(left) == 0, strings.Join(left, "; ")
}
