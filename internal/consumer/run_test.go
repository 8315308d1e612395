package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// runInBackground starts r.Run and returns a channel that yields its
// result.
func runInBackground(ctx context.Context, r *Runtime, h Handler) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, h) }()
	return done
}

func consumerInfo(t testing.TB, cons jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func publish(t testing.TB, js jetstream.JetStream, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := js.Publish(context.Background(), "work."+b, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRunSettlesEveryFateEndToEnd(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	cons := workStream(t, js, 5*time.Second)
	r, m, _ := testRuntime(t, js, func(c *Config) {
		c.Stage, c.Consumer, c.Workers, c.MaxDeliver = events.ConsumerApplier, cons, 3, 3
		c.Backoff = Backoff{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond, Jitter: 0.2}
	})
	var mu sync.Mutex
	deliveries := map[string][]int{}
	h := func(_ context.Context, msg jetstream.Msg, d Delivery) Fate {
		body := string(msg.Data())
		mu.Lock()
		deliveries[body] = append(deliveries[body], d.Attempt)
		mu.Unlock()
		switch {
		case body == "ok":
			return Done()
		case body == "poison":
			return Poison("bad input")
		case body == "flaky" && d.Attempt > 1:
			return Done()
		}
		return Retry(errors.New("still down"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runInBackground(ctx, r, h)
	publish(t, js, "ok", "poison", "flaky", "hopeless")

	eventually(t, 10*time.Second, "all four messages settled", func() bool {
		info := consumerInfo(t, cons)
		return info.AckFloor.Stream == 4 && info.NumAckPending == 0 && info.NumPending == 0
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}

	mu.Lock()
	defer mu.Unlock()
	for body, want := range map[string]string{"ok": "[1]", "poison": "[1]", "flaky": "[1 2]", "hopeless": "[1 2 3]"} {
		if got := fmt.Sprint(deliveries[body]); got != want {
			t.Errorf("%s delivered as attempts %s, want %s", body, got, want)
		}
	}
	reasons := map[string]string{}
	for _, d := range deadLetters(t, js) {
		reasons[string(d.Data)] = d.Header.Get(events.HeaderDeadReason)
	}
	if len(reasons) != 2 || reasons["poison"] != "bad input" || reasons["hopeless"] != "gave up after 3 deliveries: still down" {
		t.Errorf("dead letters %v", reasons)
	}
	if m.get(OutcomeAck) != 2 || m.get(OutcomeNak) != 3 || m.get(OutcomeDeadLetter) != 2 {
		t.Errorf("settled %+v, want 2 acks, 3 naks, 2 dead letters", m.settled)
	}
}

// TestRunDrainsInFlightHandlersOnShutdown: after cancel, a handler that is
// still working keeps an uncancelled context, is settled when it returns,
// and Run does not return before that.
func TestRunDrainsInFlightHandlersOnShutdown(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	cons := workStream(t, js, 30*time.Second)
	r, m, _ := testRuntime(t, js, func(c *Config) { c.Consumer, c.Workers, c.Grace = cons, 2, time.Minute })
	started, release := make(chan context.Context, 1), make(chan struct{})
	h := func(ctx context.Context, _ jetstream.Msg, _ Delivery) Fate {
		started <- ctx
		select {
		case <-release:
			return Done()
		case <-ctx.Done():
			return Retry(ctx.Err())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runInBackground(ctx, r, h)
	publish(t, js, "slow")
	var hctx context.Context
	select {
	case hctx = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a handler was still running", err)
	case <-time.After(300 * time.Millisecond):
	}
	if hctx.Err() != nil {
		t.Fatalf("handler context cancelled by the shutdown: %v", hctx.Err())
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return once the handler finished")
	}
	// Settled after the iterator was stopped: the ack still reached the server.
	testenv.Eventually(t, 5*time.Second, "the ack to reach the server", func() bool {
		info := consumerInfo(t, cons)
		return info.AckFloor.Stream == 1 && info.NumAckPending == 0
	})
	if m.get(OutcomeAck) != 1 {
		t.Errorf("settled %+v", m.settled)
	}
}

// TestRunGraceExpiryNaksWithoutDeadLetter: a handler that outlives the grace
// period is cancelled; its Retry, on what is its last delivery, is a short
// nak, so the next run gets the message back at once (not after AckWait),
// and nothing is dead-lettered.
func TestRunGraceExpiryNaksWithoutDeadLetter(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	cons := workStream(t, js, 30*time.Second)
	mod := func(c *Config) {
		c.Consumer, c.MaxDeliver, c.Grace = cons, 1, 50*time.Millisecond
		c.Backoff = Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	}
	r, m, _ := testRuntime(t, js, mod)
	started := make(chan Delivery, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := runInBackground(ctx, r, func(ctx context.Context, _ jetstream.Msg, d Delivery) Fate {
		started <- d
		<-ctx.Done()
		return Retry(ctx.Err())
	})
	publish(t, js, "stuck")
	if d := <-started; !d.Last {
		t.Fatalf("delivery %+v, want the last one (MaxDeliver 1)", d)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the grace period")
	}
	if n := len(deadLetters(t, js)); n != 0 || m.get(OutcomeNak) != 1 {
		t.Fatalf("%d dead letters, settled %+v: want a nak and no dead letter", n, m.settled)
	}

	r2, _, _ := testRuntime(t, js, mod)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	again := make(chan Delivery, 1)
	done2 := runInBackground(ctx2, r2, func(_ context.Context, _ jetstream.Msg, d Delivery) Fate {
		again <- d
		return Done()
	})
	select {
	case d := <-again:
		if d.Attempt != 2 {
			t.Errorf("redelivered as attempt %d, want 2", d.Attempt)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the nak'ed message did not come back")
	}
	cancel2()
	if err := <-done2; err != nil {
		t.Error(err)
	}
}

// TestRunSurvivesConsumerRecreation: the iterator fails when the consumer
// is deleted; Run logs it, keeps going, and consumes the recreated one.
func TestRunSurvivesConsumerRecreation(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	cons := workStream(t, js, 30*time.Second)
	r, _, logs := testRuntime(t, js, func(c *Config) { c.Consumer = cons })
	got := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := runInBackground(ctx, r, func(_ context.Context, msg jetstream.Msg, _ Delivery) Fate {
		got <- string(msg.Data())
		return Done()
	})
	publish(t, js, "before")
	if b := <-got; b != "before" {
		t.Fatalf("got %q", b)
	}
	bg := context.Background()
	if err := js.DeleteConsumer(bg, "WORK", "worker"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the iterator failure to be logged", func() bool {
		return strings.Contains(logs.String(), "consuming failed")
	})
	if _, err := js.CreateOrUpdateConsumer(bg, "WORK", jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1, DeliverPolicy: jetstream.DeliverNewPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	publish(t, js, "after")
	select {
	case b := <-got:
		if b != "after" {
			t.Fatalf("got %q, want after", b)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("nothing consumed from the recreated consumer; log:\n%s", logs)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) before its context ended", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRunNeedsConsumerAndHandler(t *testing.T) {
	r, _, _ := testRuntime(t, nil, nil)
	if err := r.Run(context.Background(), func(context.Context, jetstream.Msg, Delivery) Fate { return Done() }); err == nil {
		t.Error("Run without a consumer succeeded")
	}
	if err := r.Run(context.Background(), nil); err == nil {
		t.Error("Run without a handler succeeded")
	}
}

// TestNewReadsConsumerConfig: AckWait comes from the consumer when unset,
// is capped at the consumer's, and a server-side MaxDeliver is warned about.
func TestNewReadsConsumerConfig(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	cons, err := js.CreateOrUpdateConsumer(context.Background(), events.StreamDLQ, jetstream.ConsumerConfig{
		Durable: "limited", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 9 * time.Second, MaxDeliver: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, _, logs := testRuntime(t, js, func(c *Config) { c.Consumer = cons })
	if r.ackWait != 9*time.Second {
		t.Errorf("AckWait %s, want the consumer's 9s", r.ackWait)
	}
	if !strings.Contains(logs.String(), "server-side MaxDeliver") {
		t.Errorf("no warning about the server's MaxDeliver:\n%s", logs)
	}
	r, _, _ = testRuntime(t, js, func(c *Config) { c.Consumer, c.AckWait = cons, time.Minute })
	if r.ackWait != 9*time.Second {
		t.Errorf("AckWait %s, want capped at the consumer's 9s", r.ackWait)
	}
}

func TestRunBoundsConcurrencyByWorkers(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	cons := workStream(t, js, 30*time.Second)
	r, _, _ := testRuntime(t, js, func(c *Config) { c.Consumer, c.Workers = cons, 2 })
	var mu sync.Mutex
	running, peak, handled := 0, 0, 0
	ctx, cancel := context.WithCancel(context.Background())
	done := runInBackground(ctx, r, func(context.Context, jetstream.Msg, Delivery) Fate {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		running--
		handled++
		mu.Unlock()
		return Done()
	})
	publish(t, js, "a", "b", "c", "d", "e", "f")
	eventually(t, 10*time.Second, "six messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled == 6
	})
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if peak != 2 {
		t.Errorf("%d handlers ran at once, want 2", peak)
	}
}

// TestNoMessageWaitsBehindBusyWorkersPastAckWait: with every worker busy
// for longer than AckWait (its own message kept alive by heartbeats), the
// messages behind it are not fetched into a buffer where their AckWait
// would run out unheartbeated: each is handled once, on its first delivery.
func TestNoMessageWaitsBehindBusyWorkersPastAckWait(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	const ackWait = time.Second
	cons := workStream(t, js, ackWait)
	r, _, _ := testRuntime(t, js, func(c *Config) { c.Consumer, c.Workers = cons, 4 })
	var mu sync.Mutex
	handled := map[string][]int{}
	ctx, cancel := context.WithCancel(context.Background())
	done := runInBackground(ctx, r, func(_ context.Context, msg jetstream.Msg, d Delivery) Fate {
		mu.Lock()
		handled[string(msg.Data())] = append(handled[string(msg.Data())], d.Attempt)
		mu.Unlock()
		if strings.HasPrefix(string(msg.Data()), "slow") {
			time.Sleep(3 * ackWait)
		}
		return Done()
	})
	// Four messages keep the four workers busy; the fifth arrives while
	// they are, with a pull request still open for more.
	publish(t, js, "slow-1", "slow-2", "slow-3", "slow-4", "b")
	eventually(t, 30*time.Second, "five messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 5
	})
	time.Sleep(2 * ackWait) // room for a redelivery to show
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for body, attempts := range handled {
		if len(attempts) != 1 || attempts[0] != 1 {
			t.Errorf("%s handled on deliveries %v, want once, on the first", body, attempts)
		}
	}
}
