package pipeline_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/cmd/kvlive/pipeline"
	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/internal/webhook"
	"kvlive/rollout"
)

// hangingHooks is an operator's webhook that never answers: every call
// waits until kvlive gives up on it (its request context ends) or the
// test ends. It counts the calls and those kvlive cancelled.
type hangingHooks struct {
	*httptest.Server
	calls, cancelled atomic.Int32
}

func startHangingHooks(t *testing.T) *hangingHooks {
	t.Helper()
	h := &hangingHooks{}
	done := make(chan struct{})
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		// Read the call whole: the server then notices the client
		// hanging up, which ends r's context.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			h.cancelled.Add(1)
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); h.Close() })
	return h
}

// withWebhooks runs the pipeline with a webhook client and two planner
// workers, as `kvlive run --planner-workers 2` does.
func withWebhooks(t *testing.T) func(*pipeline.Config, jetstream.JetStream) {
	client, err := webhook.New(webhook.TLS{}, "127.0.0.1") // the tests' webhooks listen on loopback
	if err != nil {
		t.Fatal(err)
	}
	return func(cfg *pipeline.Config, _ jetstream.JetStream) {
		cfg.Webhooks, cfg.PlannerWorkers = client, 2
	}
}

func requestSwitch(t *testing.T, js jetstream.JetStream, selector, to string, policy *events.Policy) string {
	t.Helper()
	id, err := rollout.RequestSwitch(context.Background(), js, events.SwitchRequest{
		From:     events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"},
		To:       events.Ref{Kind: events.KindClusterInstancetype, Name: to},
		Selector: selector, Policy: policy,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestAHungConfirmWebhookStopsNoOtherRollout: two switches whose confirm
// webhook never answers (within a timeout of minutes) take as many planner
// workers as there are; an edit made meanwhile is planned and rolled out
// all the same, each waiting switch says what it waits for, and an abort
// of one ends it, its VMs skipped, and cancels its call.
func TestAHungConfirmWebhookStopsNoOtherRollout(t *testing.T) {
	hooks := startHangingHooks(t)
	clients, js, w := start(t, withWebhooks(t))
	ctx := context.Background()
	policy := &events.Policy{ConfirmWebhook: hooks.URL + "/confirm", WebhookTimeout: "4m"}
	first := requestSwitch(t, js, "parity=0", "u2", policy)
	second := requestSwitch(t, js, "parity=1", "u3", policy)
	testenv.Eventually(t, time.Minute, "both confirm webhooks asked", func() bool { return hooks.calls.Load() >= 2 })

	// An edit of u1 meanwhile: planned and applied, though both hung
	// calls are still out.
	edited := edit(t, clients)
	p := follow(t, js, edited)
	if n := len(p.Outcomes); n != fleetSize {
		t.Errorf("the edit has %d outcomes while two confirm webhooks hang; want all %d", n, fleetSize)
	}

	store, err := rollout.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, second} {
		c, _, err := store.Get(ctx, id)
		if err != nil || c.State != events.StatePaused || !strings.Contains(c.Reason, "awaiting its confirm webhook") {
			t.Errorf("%s while its confirm webhook hangs: %s %q (%v); want paused, saying it awaits the webhook", id, c.State, c.Reason, err)
		}
	}
	for i := 0; i < fleetSize; i += 2 {
		if o := p.Outcomes[vmUID(i)]; !o.Wrote {
			t.Errorf("vm-%02d: %+v; want the edit to have moved it", i, o)
		}
	}

	steer(t, js, first, events.ActionAbort, "no answer")
	aborted := follow(t, js, first)
	for uid, o := range aborted.Outcomes {
		if o.Wrote || o.Result != events.ResultSkip {
			t.Errorf("%s of the aborted switch: %+v; want skipped", uid, o)
		}
	}
	testenv.Eventually(t, time.Minute, "the aborted switch's call cancelled", func() bool { return hooks.cancelled.Load() >= 1 })
	if n := w.total(); n != fleetSize {
		t.Errorf("%d writes; want the edit's %d alone", n, fleetSize)
	}
}

func vmUID(i int) string { return "uid-vm-" + twoDigits(i) }

func twoDigits(i int) string { return string([]byte{byte('0' + i/10), byte('0' + i%10)}) }

// TestAHungCheckWebhookHoldsItsRolloutAlone: a batched switch whose check
// webhook never answers waits at its first batch while another batched
// switch goes through all of its batches; a promote of the waiting one
// releases its next batch, whose VMs move, and cancels the call.
func TestAHungCheckWebhookHoldsItsRolloutAlone(t *testing.T) {
	hooks := startHangingHooks(t)
	_, js, w := start(t, withWebhooks(t))
	ctx := context.Background()
	held := requestSwitch(t, js, "parity=0", "u2", &events.Policy{BatchSize: "5", CheckWebhook: hooks.URL + "/check", WebhookTimeout: "4m"})
	testenv.Eventually(t, time.Minute, "the check webhook asked about batch 1", func() bool { return hooks.calls.Load() >= 1 })

	other := requestSwitch(t, js, "parity=1", "u3", &events.Policy{BatchSize: "5"})
	if p := follow(t, js, other); len(p.Outcomes) != fleetSize/2 {
		t.Errorf("the other switch has %d outcomes while a check webhook hangs; want all %d", len(p.Outcomes), fleetSize/2)
	}
	store, err := rollout.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// The gate looks again every tick; on a loaded machine a look may
	// catch a VM of the batch still settling and say so before it says
	// again that it asks its webhook.
	var c events.Control
	testenv.Eventually(t, time.Minute, "the held switch's gate asking its check webhook", func() bool {
		c, _, err = store.Get(ctx, held)
		return err == nil && strings.Contains(c.Gate, "asking its check webhook about batch 1 of 4")
	})
	if c.Batch != 0 {
		t.Errorf("the held switch: batch %d, gate %q; want batch 1, saying it asks its check webhook", c.Batch+1, c.Gate)
	}

	if _, err := rollout.PromoteNext(ctx, js, held, 0, "ops", time.Now()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the promoted batch moved", func() bool {
		acct, err := rollout.AccountOf(ctx, js, held)
		return err == nil && len(acct.Latest) == 10
	})
	testenv.Eventually(t, time.Minute, "the check call cancelled by the promote", func() bool { return hooks.cancelled.Load() >= 1 })
	if n := w.total(); n != fleetSize/2+10 {
		t.Errorf("%d writes; want the other switch's %d and the held one's two batches, 10", n, fleetSize/2)
	}
}

// TestAConfirmWebhookReleasesTheFirstBatch: a switch whose confirm webhook
// says yes moves its VMs once it has, and the call named them.
func TestAConfirmWebhookReleasesTheFirstBatch(t *testing.T) {
	var calls atomic.Int32
	yes := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(yes.Close)
	_, js, w := start(t, withWebhooks(t))
	id := requestSwitch(t, js, "parity=0", "u2", &events.Policy{ConfirmWebhook: yes.URL + "/confirm?token=secret"})
	p := follow(t, js, id)
	if len(p.Outcomes) != fleetSize/2 || w.total() != fleetSize/2 || calls.Load() != 1 {
		t.Errorf("%d outcomes, %d writes, %d calls; want %d, %d and one call", len(p.Outcomes), w.total(), calls.Load(), fleetSize/2, fleetSize/2)
	}
	store, err := rollout.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := store.Get(context.Background(), id)
	if err != nil || c.State != events.StateRunning || !strings.Contains(c.Reason, "confirm webhook said yes") || strings.Contains(c.Reason, "secret") {
		t.Errorf("control record %s %q (%v); want running, confirmed, the token redacted", c.State, c.Reason, err)
	}
}
