package notify

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/consumer"
	"kvlive/internal/testenv"
	"kvlive/internal/webhook"
	"kvlive/readmodel/inspect"
	"kvlive/rollout"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

var t0 = time.Date(2026, 12, 5, 11, 0, 0, 0, time.UTC)

// TestStates: what each state of a rollout tells, once per kind and
// occurrence, with the commands that act on it.
func TestStates(t *testing.T) {
	a := rollout.Account{EventID: "switch/x", Phase: rollout.PhasePaused, Recorded: true, Planned: 4, Batches: []int{2, 2},
		Record:   events.Rollout{Counts: map[events.Result]int{events.ResultLive: 4}},
		Outcomes: map[events.Result]int{events.ResultLive: 1, events.ResultFailed: 1},
		Control:  events.Control{State: events.StatePaused, By: rollout.GatedBy, Reason: "batch 1 of 2: 1 VMs failed", At: t0},
		Verdicts: map[events.Observed]int{events.ObservedPending: 1}, Differ: 1}
	got := States(a, "https://kvlive.example/")
	var kinds []string
	for _, s := range got {
		kinds = append(kinds, s.Kind+"/"+s.Occurrence)
	}
	if want := []string{"started/1", "held/" + itoa(t0.UnixNano()), "differ/0", "failed/0"}; !slices.Equal(kinds, want) {
		t.Fatalf("states %v, want %v", kinds, want)
	}
	held := got[1]
	if !slices.Contains(held.Commands, "kvlive rollout promote switch/x") || held.Why != a.Control.Reason || held.Link != "https://kvlive.example/rollouts/switch/x" {
		t.Errorf("held: %+v", held.Notification)
	}
	a.Phase, a.Control = rollout.PhaseComplete, events.Control{State: events.StateRunning}
	got = States(a, "")
	if last := got[len(got)-1]; last.Kind != events.NotifyCompleted || !strings.Contains(last.Text, "is complete") || last.Link != "" {
		t.Errorf("complete: %+v", last)
	}
	a.EventID = "undo/y"
	if got = States(a, ""); got[len(got)-1].Kind != events.NotifyUndone {
		t.Errorf("an undo's completion is %s, want undone", got[len(got)-1].Kind)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// run runs a notifier until the returned func stops it.
func run(t *testing.T, js jetstream.JetStream, cfg Config) func() {
	t.Helper()
	client, err := webhook.New(webhook.TLS{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.JetStream, cfg.Client = js, client
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func record(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.MarshalRollout(events.Rollout{EventID: id, Planned: 2, PlannedAt: t0, Counts: map[events.Result]int{events.ResultLive: 2},
		Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), events.RolloutKey(id), b); err != nil {
		t.Fatal(err)
	}
	// A plan in flight: the rollout is running.
	p := events.Plan{EventID: id, VM: events.VMRef{Namespace: "shop", Name: "vm-a", UID: "uid-a"}, Action: events.ResultLive,
		Target: events.Target{Move: events.MoveRepin, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"}, Generation: 2}}
	body, err := events.Encode(events.TypePlan, "plan/"+id, "kvlive/test", "", t0, &p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), events.NewMsg(events.PlanSubject("shop", id), "plan/"+id, events.TypePlan, body)); err != nil {
		t.Fatal(err)
	}
}

// TestTwoReplicasTellOnceInOrder: two notifiers (two replicas) watch one
// rollout that starts and is paused; the receiver is told each once, in
// order; a notifier started afresh after them tells nothing again.
func TestTwoReplicasTellOnceInOrder(t *testing.T) {
	js := testenv.JetStream(t)
	r := testenv.NewNotifyReceiver(t, testenv.ReceiverOK)
	cfg := Config{Receivers: []Receiver{{URL: r.URL(), Format: FormatCloudEvents}}}
	stop1, stop2 := run(t, js, cfg), run(t, js, cfg)
	record(t, js, "switch/a")
	testenv.Eventually(t, 30*time.Second, "the start told", func() bool { return len(r.Kinds()) == 1 })
	if _, err := rollout.Steer(t.Context(), js, rollout.Steering{EventID: "switch/a", Action: events.ActionPause, By: "alice", Reason: "lunch"}, t0); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the pause told", func() bool { return len(r.Kinds()) == 2 })
	stop1()
	stop2()
	stop3 := run(t, js, cfg)
	time.Sleep(3 * checkEvery) // a third notice would come by now
	stop3()
	if got := r.Kinds(); !slices.Equal(got, []string{events.NotifyStarted, events.NotifyPaused}) {
		t.Errorf("told %v, want started then paused, once each", got)
	}
	if p := r.Took()[1]; p.Why != "lunch" || !slices.Contains(p.Commands, "kvlive rollout resume switch/a") {
		t.Errorf("the pause: %+v", p)
	}
}

// TestAReceiverThatStaysDownEndsInADeadLetter: a receiver that answers
// 503, or redirects (a redirect is not followed: a failure, as for gate
// webhooks), has each notification dead-lettered with the reason after
// its deliveries, and the pipeline's records are untouched.
func TestAReceiverThatStaysDownEndsInADeadLetter(t *testing.T) {
	for mode, want := range map[string]string{testenv.ReceiverDown: "503 Service Unavailable", testenv.ReceiverRedirect: "a redirect is a no"} {
		t.Run(mode, func(t *testing.T) {
			js := testenv.JetStream(t)
			r := testenv.NewNotifyReceiver(t, mode)
			letters := deadLettersOf(t, js, Receiver{URL: r.URL(), Format: FormatSlack}, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
			if l := letters[0]; l.Stage != Stage || !strings.Contains(l.Reason, "gave up after 2 deliveries") || !strings.Contains(l.Reason, want) {
				t.Errorf("dead letter: stage %s, reason %q", l.Stage, l.Reason)
			}
		})
	}
}

// deadLettersOf runs a notifier of receiver r, giving up after two
// deliveries, over a recorded rollout until a notification of it is
// dead-lettered, and returns the dead letters.
func deadLettersOf(t *testing.T, js jetstream.JetStream, r Receiver, log *slog.Logger) []inspect.Letter {
	t.Helper()
	stop := run(t, js, Config{Receivers: []Receiver{r}, MaxDeliver: 2, Log: log, Backoff: consumer.Backoff{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	defer stop()
	record(t, js, "switch/b")
	store := inspect.Store{JetStream: js}
	var letters []inspect.Letter
	testenv.Eventually(t, 30*time.Second, "a dead letter", func() bool {
		letters, _ = store.List(t.Context())
		return len(letters) > 0
	})
	return letters
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestParseReceiver: the --notify forms.
func TestParseReceiver(t *testing.T) {
	if r, err := ParseReceiver("https://hooks.slack.com/services/T/B/X"); err != nil || r.Format != FormatSlack {
		t.Errorf("a Slack hook: %+v, %v", r, err)
	}
	if r, err := ParseReceiver("https://events.example/in;format=cloudevents"); err != nil || r.Format != FormatCloudEvents {
		t.Errorf("cloudevents: %+v, %v", r, err)
	}
	for _, bad := range []string{"ftp://x/", "https://x/;format=xml", "https://x/;colour=red", "https://x/;headers=/nonexistent"} {
		if _, err := ParseReceiver(bad); err == nil {
			t.Errorf("ParseReceiver(%q) took it", bad)
		}
	}
}

// TestOutcomesAloneAreLookedAtLessOften: a rollout whose only changes are
// new outcomes is read again at most every DefaultOutcomesEvery (each read
// is all its outcomes), while a change of its rollout or control record is
// looked at the next time round; what was looked at long ago is forgotten.
func TestOutcomesAloneAreLookedAtLessOften(t *testing.T) {
	n := &Notifier{cfg: Config{OutcomesEvery: DefaultOutcomesEvery}, dirty: map[string]bool{}, looked: map[string]time.Time{}}
	step := func(at time.Duration, want ...string) {
		t.Helper()
		got := n.due(t0.Add(at))
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("at %v: looked at %v, want %v", at, got, want)
		}
	}
	n.mark(false, "a")
	step(0, "a") // never looked at
	n.mark(false, "a")
	step(time.Second) // outcomes again, a second later: not yet
	step(2 * time.Second)
	n.mark(true, "a")
	step(3*time.Second, "a") // its control record changed
	n.mark(false, "a")
	n.mark(false, "b")
	step(4*time.Second, "b")
	step(12 * time.Second)
	step(13*time.Second, "a") // DefaultOutcomesEvery after its last look
	step(24 * time.Second)
	if len(n.looked) != 0 {
		t.Errorf("still remembered: %v", n.looked)
	}
}

// failures counts the notifier's failed looks at rollouts.
type failures struct{ n atomic.Int32 }

func (f *failures) NotifyCheckFailed()      { f.n.Add(1) }
func (f *failures) Settled(string, string)  {}
func (f *failures) DeadLetterFailed(string) {}

// TestARolloutThatCannotBeReadIsRetriedAndCounted: a rollout record the
// notifier cannot read is looked at again, each failure said in the log
// and counted (kvlive_notify_checks_failed_total); once readable, its
// start is told, once.
func TestARolloutThatCannotBeReadIsRetriedAndCounted(t *testing.T) {
	js := testenv.JetStream(t)
	r := testenv.NewNotifyReceiver(t, testenv.ReceiverOK)
	logs := &testenv.LogBuffer{}
	m := &failures{}
	stop := run(t, js, Config{Receivers: []Receiver{{URL: r.URL(), Format: FormatCloudEvents}}, Metrics: m, Log: slog.New(slog.NewTextHandler(logs, nil))})
	defer stop()
	kv, err := js.KeyValue(t.Context(), events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), events.RolloutKey("switch/c"), []byte("{not a rollout")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "two failed looks counted", func() bool { return m.n.Load() >= 2 })
	if !strings.Contains(logs.String(), "could not be read or published") {
		t.Errorf("the failures were not logged:\n%s", logs)
	}
	record(t, js, "switch/c")
	testenv.Eventually(t, 30*time.Second, "the start told", func() bool { return len(r.Kinds()) == 1 })
}

// TestAChatHooksSecretStaysWithTheOperator: a chat hook's URL carries its
// secret in the path. Whether the hook answers 503, redirects or cannot be
// reached, the secret is in no log line, in no consumer description and in
// no dead letter's reason, which the reader role reads (issue 59, item 2).
func TestAChatHooksSecretStaysWithTheOperator(t *testing.T) {
	const secret = "T0AAAAAAA/B0BBBBBBB/s3cretXXXXXXXXXXXXXXXX"
	for mode, base := range map[string]string{testenv.ReceiverDown: "", testenv.ReceiverRedirect: "", "unreachable": "http://127.0.0.1:1"} {
		t.Run(mode, func(t *testing.T) {
			js := testenv.JetStream(t)
			if base == "" {
				base = testenv.NewNotifyReceiver(t, mode).URL()
			}
			var logs testenv.LogBuffer
			hook := Receiver{URL: base + "/services/" + secret + "?token=s3cretquery", Format: FormatSlack}
			letters := deadLettersOf(t, js, hook, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			c, err := js.Consumer(t.Context(), events.StreamNotify, hook.consumerName())
			if err != nil {
				t.Fatal(err)
			}
			read := map[string]string{"the dead letter's reason": letters[0].Reason, "the consumer's description": c.CachedInfo().Config.Description, "the log": logs.String()}
			for what, text := range read {
				if strings.Contains(text, "s3cret") || strings.Contains(text, "/services/") {
					t.Errorf("%s shows the hook's secret:\n%s", what, text)
				}
			}
			if !strings.Contains(letters[0].Reason, strings.TrimPrefix(base, "http://")) {
				t.Errorf("the dead letter's reason %q does not name the receiver's host", letters[0].Reason)
			}
		})
	}
}

// TestWhatWasToldOutlivesTheReplayHorizon: a notification stays stored for
// as long as its rollout's records, however short the replay horizon, so
// a notifier started again after the horizon tells nothing twice (issue
// 59, item 1: the stream used to age it out).
func TestWhatWasToldOutlivesTheReplayHorizon(t *testing.T) {
	js := testenv.JetStream(t)
	r := testenv.NewNotifyReceiver(t, testenv.ReceiverOK)
	streams := events.DefaultStreamOptions()
	streams.MaxAge = time.Second
	cfg := Config{Receivers: []Receiver{{URL: r.URL(), Format: FormatCloudEvents}}, Streams: streams}
	stop := run(t, js, cfg)
	record(t, js, "switch/c")
	testenv.Eventually(t, 30*time.Second, "the start told", func() bool { return len(r.Kinds()) == 1 })
	stop()
	time.Sleep(3 * streams.MaxAge) // past the horizon: an aged stream would have dropped it
	stop = run(t, js, cfg)
	time.Sleep(3 * checkEvery) // a second notice would come by now
	stop()
	if got := r.Kinds(); !slices.Equal(got, []string{events.NotifyStarted}) {
		t.Errorf("told %v, want started once", got)
	}
}

// TestAPauseLiftedBeforeItWasSeenIsTold: a pause resumed within the
// notifier's tick, and one paused and resumed while no notifier ran, are
// each told once, as pauses lifted since; nothing is told twice after.
func TestAPauseLiftedBeforeItWasSeenIsTold(t *testing.T) {
	js := testenv.JetStream(t)
	r := testenv.NewNotifyReceiver(t, testenv.ReceiverOK)
	cfg := Config{Receivers: []Receiver{{URL: r.URL(), Format: FormatCloudEvents}}}
	steer := func(action events.ControlAction, reason string, at time.Time) {
		t.Helper()
		if _, err := rollout.Steer(t.Context(), js, rollout.Steering{EventID: "switch/d", Action: action, By: "alice", Reason: reason}, at); err != nil {
			t.Fatal(err)
		}
	}
	stop := run(t, js, cfg)
	record(t, js, "switch/d")
	testenv.Eventually(t, 30*time.Second, "the start told", func() bool { return len(r.Kinds()) == 1 })
	steer(events.ActionPause, "a look", t0)
	steer(events.ActionResume, "", t0.Add(time.Millisecond))
	testenv.Eventually(t, 30*time.Second, "the pause within a tick told", func() bool { return len(r.Kinds()) == 2 })
	stop()
	steer(events.ActionPause, "while no notifier ran", t0.Add(time.Minute))
	steer(events.ActionResume, "", t0.Add(2*time.Minute))
	stop = run(t, js, cfg)
	testenv.Eventually(t, 30*time.Second, "the pause while down told", func() bool { return len(r.Kinds()) == 3 })
	time.Sleep(3 * checkEvery) // a fourth notice would come by now
	stop()
	if got := r.Kinds(); !slices.Equal(got, []string{events.NotifyStarted, events.NotifyPaused, events.NotifyPaused}) {
		t.Fatalf("told %v, want started, then each pause once", got)
	}
	for i, reason := range []string{"a look", "while no notifier ran"} {
		if p := r.Took()[i+1]; p.Why != reason || !strings.Contains(p.Text, "a pause lifted since") || len(p.Commands) != 0 {
			t.Errorf("pause %d: %+v", i+1, p)
		}
	}
}
