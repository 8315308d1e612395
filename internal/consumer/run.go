package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// restartPause is how long the runtime waits before it starts consuming
// again after a fetch failed, so a consumer that is gone for a while
// (deleted, being recreated, its server down) is not hammered.
const restartPause = time.Second

// pullExpiry is how long each fetch waits on the server for messages. A
// consumer that vanished (deleted, or recreated) is noticed at the next
// fetch, at most one expiry later; the cost of a short one is an idle pull
// request every few seconds.
const pullExpiry = 10 * time.Second

// Handler processes one message and says what should become of it. It must
// not ack, nak or term msg itself. ctx outlives the context given to Run by
// Config.Grace, so a handler can finish its work during a shutdown; it
// should still return promptly once ctx ends.
type Handler func(ctx context.Context, msg jetstream.Msg, d Delivery) Fate

// Run consumes Config.Consumer with Config.Workers handlers at once and
// settles every message, until ctx ends and every in-flight handler has
// returned and been settled. Failures of the consumer itself (deleted and
// recreated, server gone) are logged and consuming starts over after a
// pause; Run returns an error only when it cannot start at all.
func (r *Runtime) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return fmt.Errorf("consumer %q: Run needs a handler", r.cfg.Stage)
	}
	if r.cfg.Consumer == nil {
		return fmt.Errorf("consumer %q: Run needs Config.Consumer", r.cfg.Stage)
	}
	// Handlers run on a context that a shutdown does not cancel, so that
	// they finish rather than fail; the grace period cancels it instead.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	var inflight sync.WaitGroup
	// A slot is taken before a message is fetched, not after, so no
	// message waits in our hands, unheartbeated, for a free worker (see
	// consumeOnce).
	slots := make(chan struct{}, r.cfg.Workers)
	r.log.Info("consuming", "workers", r.cfg.Workers, "max_deliver", r.cfg.MaxDeliver, "ack_wait", r.ackWait)
	for ctx.Err() == nil {
		err := r.consumeOnce(ctx, hctx, h, slots, &inflight)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("consuming failed; starting over after a pause", "err", err, "pause", restartPause)
			select {
			case <-ctx.Done():
			case <-r.cfg.Clock.After(restartPause):
			}
		}
	}
	r.drain(&inflight, cancelHandlers)
	// Acks are sent without waiting for the server; flush them so a
	// process that closes its connection next loses none.
	if err := r.cfg.JetStream.Conn().Flush(); err != nil {
		r.log.Warn("flushing the last acks failed; the server redelivers what it did not get", "err", err)
	}
	r.log.Info("stopped consuming")
	return nil
}

// consumeOnce fetches messages for free workers only, until ctx ends (nil)
// or a fetch fails (its error). A message is asked of the server only when
// a worker is free to take it: a message read ahead counts as delivered and
// its AckWait runs, unheartbeated, so one that waited in a client buffer
// behind busy workers would be delivered again while still to be handled.
func (r *Runtime) consumeOnce(ctx, hctx context.Context, h Handler, slots chan struct{}, inflight *sync.WaitGroup) error {
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	more:
		for free < r.cfg.Workers {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		if err := r.fetch(ctx, hctx, h, slots, inflight, free); err != nil {
			return err
		}
	}
}

// fetch asks for up to free messages, one pull request that waits up to
// pullExpiry, and hands each to a worker as it arrives; the slots of the
// messages that did not come are given back.
func (r *Runtime) fetch(ctx, hctx context.Context, h Handler, slots chan struct{}, inflight *sync.WaitGroup, free int) error {
	fctx, cancel := context.WithTimeout(ctx, pullExpiry)
	defer cancel()
	batch, err := r.cfg.Consumer.Fetch(free, jetstream.FetchContext(fctx))
	if err != nil {
		giveBack(slots, free)
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("fetch: %w", err)
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		if ctx.Err() != nil {
			// Fetched as the shutdown began: hand it back at once rather
			// than start work or leave it to wait out AckWait.
			<-slots
			r.nak(msg, r.Delivery(msg), 0)
			continue
		}
		inflight.Go(func() {
			defer func() { <-slots }()
			r.process(ctx, hctx, h, msg)
		})
	}
	giveBack(slots, free-got)
	switch err := batch.Error(); {
	case err == nil, ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil // the pull expired with fewer messages than asked: normal
	default:
		return fmt.Errorf("fetch: %w", err)
	}
}

// giveBack frees n worker slots taken for messages that did not come.
func giveBack(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

// drain waits for the in-flight handlers, cancelling their context once the
// grace period is over.
func (r *Runtime) drain(inflight *sync.WaitGroup, cancelHandlers context.CancelFunc) {
	finished := make(chan struct{})
	go func() {
		inflight.Wait()
		close(finished)
	}()
	if r.cfg.Grace <= 0 {
		cancelHandlers()
		<-finished
		return
	}
	grace := r.cfg.Clock.NewTimer(r.cfg.Grace)
	defer grace.Stop()
	select {
	case <-finished:
		return
	case <-grace.C():
		r.log.Warn("grace period over; cancelling in-flight handlers", "grace", r.cfg.Grace)
		cancelHandlers()
	}
	<-finished
}
