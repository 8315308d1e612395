package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// restartPause is how long the runtime waits before it starts consuming
// again after the iterator failed, so a consumer that is gone for a while
// (deleted, being recreated, its server down) is not hammered.
const restartPause = time.Second

// pullExpiry is how long each pull request waits on the server. nats.go
// notices a consumer that vanished without a word (deleted while no pull was
// pending, or before it was recreated) only by missing heartbeats, after one
// expiry; nats.go's default of 30s would leave a recreated consumer
// unconsumed that long, while the cost of a shorter one is an idle pull
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
	// message waits in our hands, unheartbeated, for a free worker; the
	// iterator's own read-ahead is kept to Workers messages for the same
	// reason (see consumeOnce).
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

// consumeOnce runs one message iterator until ctx ends (nil) or the
// iterator fails (its error).
func (r *Runtime) consumeOnce(ctx, hctx context.Context, h Handler, slots chan struct{}, inflight *sync.WaitGroup) error {
	// Messages the iterator reads ahead count as delivered, and their
	// AckWait runs, before any handler sees them: keep that to one
	// message per worker.
	it, err := r.cfg.Consumer.Messages(jetstream.PullMaxMessages(r.cfg.Workers), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return fmt.Errorf("open message iterator: %w", err)
	}
	defer it.Stop()
	unhook := context.AfterFunc(ctx, it.Stop)
	defer unhook()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := it.Next()
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return fmt.Errorf("message iterator closed unexpectedly: %w", err)
			}
			return fmt.Errorf("next message: %w", err)
		}
		if ctx.Err() != nil {
			// Fetched as the shutdown began: hand it back at once rather
			// than start work or leave it to wait out AckWait.
			<-slots
			r.nak(msg, r.Delivery(msg), 0)
			return nil
		}
		inflight.Go(func() {
			defer func() { <-slots }()
			r.process(ctx, hctx, h, msg)
		})
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
