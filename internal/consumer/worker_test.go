package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestHeartbeatWhileHandlerRuns(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	r, m, _ := testRuntime(t, nil, func(c *Config) { c.AckWait = 3 * time.Second; c.Clock = fc })
	msg := newFakeMsg(1, 1, "slow")
	started, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	h := func(context.Context, jetstream.Msg, Delivery) Fate {
		close(started)
		<-release
		return Done()
	}
	ctx := context.Background()
	go func() {
		defer close(finished)
		r.process(ctx, ctx, h, msg)
	}()
	<-started
	for i := 1; i <= 3; i++ {
		fc.Step(time.Second) // AckWait/3
		eventually(t, 5*time.Second, "an InProgress per AckWait/3", func() bool { return msg.count("progress") == i })
	}
	close(release)
	<-finished
	// Ticks after the handler returned send nothing more.
	fc.Step(time.Second)
	fc.Step(time.Second)
	calls := msg.recorded()
	want := []call{{op: "progress"}, {op: "progress"}, {op: "progress"}, {op: "ack"}}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls = %+v, want %+v", calls, want)
	}
	if m.get(OutcomeAck) != 1 {
		t.Errorf("settled %+v", m.settled)
	}
}

func TestNoHeartbeatWithoutAckWait(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	r, _, _ := testRuntime(t, nil, func(c *Config) { c.Clock = fc })
	msg := newFakeMsg(1, 1, "x")
	ctx := context.Background()
	r.process(ctx, ctx, func(context.Context, jetstream.Msg, Delivery) Fate {
		if fc.HasWaiters() {
			t.Error("a heartbeat ticker was started without an AckWait")
		}
		return Done()
	}, msg)
	if got := msg.recorded(); !slices.Equal(got, []call{{op: "ack"}}) {
		t.Fatalf("calls = %+v", got)
	}
}

// TestShutdownRetryIsNakNotDeadLetter: on its last delivery a Retry would
// be dead-lettered, but not when the runtime is shutting down (noJS fails
// the test on any dead-letter publish).
func TestShutdownRetryIsNakNotDeadLetter(t *testing.T) {
	for name, fate := range map[string]func(ctx context.Context) Fate{
		"retry with the cancellation": func(ctx context.Context) Fate { return Retry(ctx.Err()) },
		"retry with another error":    func(context.Context) Fate { return Retry(errors.New("client closing")) },
		"zero fate":                   func(context.Context) Fate { return Fate{} },
	} {
		t.Run(name, func(t *testing.T) {
			r, m, logs := testRuntime(t, nil, nil) // MaxDeliver 5, Backoff.Min 1s
			msg := newFakeMsg(5, 1, "x")
			runCtx, cancel := context.WithCancel(context.Background())
			cancel()
			hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(runCtx))
			cancelHandlers() // the grace period is over too
			r.process(runCtx, hctx, func(ctx context.Context, _ jetstream.Msg, _ Delivery) Fate { return fate(ctx) }, msg)
			if got, want := msg.recorded(), []call{{op: "nak-delay", delay: time.Second}}; !slices.Equal(got, want) {
				t.Fatalf("calls = %+v, want %+v", got, want)
			}
			if m.get(OutcomeNak) != 1 || m.get(OutcomeDeadLetter) != 0 || !strings.Contains(logs.String(), "interrupted by shutdown") {
				t.Errorf("settled %+v, log:\n%s", m.settled, logs)
			}
		})
	}
}

func TestShutdownKeepsDoneAndPoison(t *testing.T) {
	r, _, _ := testRuntime(t, nil, nil)
	msg := newFakeMsg(1, 1, "x")
	runCtx, cancel := context.WithCancel(context.Background())
	cancel()
	r.process(runCtx, runCtx, func(context.Context, jetstream.Msg, Delivery) Fate { return Done() }, msg)
	if got := msg.recorded(); !slices.Equal(got, []call{{op: "ack"}}) {
		t.Fatalf("Done during shutdown: calls = %+v, want an ack", got)
	}
}

func TestHandlerPanicBecomesRetry(t *testing.T) {
	r, m, logs := testRuntime(t, nil, nil)
	r.rand = func() float64 { return 0 }
	msg := newFakeMsg(2, 1, "x")
	ctx := context.Background()
	r.process(ctx, ctx, func(context.Context, jetstream.Msg, Delivery) Fate { panic("nil map") }, msg)
	if got, want := msg.recorded(), []call{{op: "nak-delay", delay: 2 * time.Second}}; !slices.Equal(got, want) {
		t.Fatalf("calls = %+v, want %+v", got, want)
	}
	if m.get(OutcomeNak) != 1 || !strings.Contains(logs.String(), "handler panicked") || !strings.Contains(logs.String(), "nil map") {
		t.Errorf("settled %+v, log:\n%s", m.settled, logs)
	}
}
