package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"kvlive/events"
	"kvlive/internal/webhook"
)

// Webhooks are asked off the pipeline: a call runs in a goroutine of its
// own, one per rollout, phase and batch, and the gate loop (or the
// planner, through a pause that awaits the answer) only looks whether the
// answer is in. One webhook that hangs holds its own rollout, for at most
// events.MaxWebhookTimeout; every other rollout, and every other stage,
// goes on. A call is cancelled as soon as its rollout's control record
// moves on (an abort, a pause, a resume, a promote), so an operator's
// decision is not waited out.

// hookKey names one call: a rollout's webhook phase about a batch, asked
// on the control record's step at (the time of its last pause, resume,
// abort or promote), so a call made before an operator acted is never
// taken as an answer after.
type hookKey struct {
	eventID string
	phase   string
	batch   int
	at      int64
}

func keyOf(eventID, phase string, batch int, c events.Control) hookKey {
	return hookKey{eventID: eventID, phase: phase, batch: batch, at: c.At.UnixNano()}
}

// hookCall is one call in flight, or answered and not yet taken.
type hookCall struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	answer webhook.Answer
	since  time.Time
}

// hookCalls runs webhook calls in the background, under the context Run
// gave it, and hands each answer to the first to take it.
type hookCalls struct {
	ctx   context.Context
	mu    sync.Mutex
	calls map[hookKey]*hookCall
	wg    sync.WaitGroup
}

func newHookCalls(ctx context.Context) *hookCalls {
	return &hookCalls{ctx: ctx, calls: map[hookKey]*hookCall{}}
}

// take returns the answer to k once it is in, forgetting the call; until
// then it starts the call with ask (when nobody has) and returns false,
// with when the call started.
func (h *hookCalls) take(k hookKey, now time.Time, ask func(context.Context) webhook.Answer) (webhook.Answer, time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.calls[k]; ok {
		select {
		case <-c.done:
			delete(h.calls, k)
			return c.answer, c.since, true
		default:
			return webhook.Answer{}, c.since, false
		}
	}
	ctx, cancel := context.WithCancelCause(h.ctx)
	c := &hookCall{cancel: cancel, done: make(chan struct{}), since: now}
	h.calls[k] = c
	h.wg.Go(func() {
		defer close(c.done)
		defer cancel(nil)
		c.answer = ask(ctx)
	})
	return webhook.Answer{}, now, false
}

// moveOn cancels (and forgets) every call about eventID asked on another
// step than c's, or every one when the rollout is aborted: what it asked
// about is decided already.
func (h *hookCalls) moveOn(eventID string, c events.Control) {
	at := c.At.UnixNano()
	why := errors.New("the rollout was " + string(c.State) + " by " + c.By)
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, call := range h.calls {
		if k.eventID == eventID && (k.at != at || c.State == events.StateAborted) {
			call.cancel(why)
			delete(h.calls, k)
		}
	}
}

// forgetExcept drops the calls of rollouts not in keep (a rollout
// that settled, or whose record aged out), cancelling those still out.
func (h *hookCalls) forgetExcept(keep func(eventID string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, call := range h.calls {
		if !keep(k.eventID) {
			call.cancel(errors.New("the rollout no longer waits for it"))
			delete(h.calls, k)
		}
	}
}

// wait waits for every call to end (they end with the context Run gave).
func (h *hookCalls) wait() { h.wg.Wait() }

// asking says what a rollout waits for while its webhook is asked.
func asking(phase string, batch, batches int, url string, since time.Time) string {
	return fmt.Sprintf("asking its %s webhook about batch %d of %d (%s) since %s", phase, batch+1, max(batches, 1), url, since.UTC().Format(time.RFC3339))
}
