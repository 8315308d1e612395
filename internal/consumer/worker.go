package consumer

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/nats-io/nats.go/jetstream"
)

// process runs h on msg with a heartbeat, then settles its fate. runCtx is
// Run's context, hctx the handlers' one.
func (r *Runtime) process(runCtx, hctx context.Context, h Handler, msg jetstream.Msg) {
	d := r.Delivery(msg)
	stop := r.heartbeat(msg, d)
	f := r.call(hctx, h, msg, d)
	// Stopped before settling, so no InProgress follows the ack.
	stop()
	if runCtx.Err() != nil && f.kind != kindDone && f.kind != kindPoison {
		// Whatever the handler says, a failure during a shutdown is most
		// likely the shutdown's doing (a cancelled context, a closing
		// client): it must not use up a delivery or become a dead letter.
		f = interrupted(f)
	}
	r.Settle(context.WithoutCancel(runCtx), msg, d, f)
}

// call runs h, turning a panic into a Retry: with the server's MaxDeliver
// unlimited, a message that crashes the process would otherwise crash every
// replica, forever; as a Retry it ends in the dead-letter stream.
func (r *Runtime) call(ctx context.Context, h Handler, msg jetstream.Msg, d Delivery) (f Fate) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("handler panicked", attrs(msg, d, "panic", p, "stack", string(debug.Stack()))...)
			f = Retry(fmt.Errorf("handler panicked: %v", p))
		}
	}()
	return h(ctx, msg, d)
}

// heartbeat tells the server every AckWait/3 that msg is still being worked
// on, so a handler slower than AckWait does not cause a redelivery. The
// returned stop waits until no more InProgress can be sent.
func (r *Runtime) heartbeat(msg jetstream.Msg, d Delivery) (stop func()) {
	every := r.ackWait / 3
	if every <= 0 {
		return func() {}
	}
	ticker := r.cfg.Clock.NewTicker(every)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C():
				if err := msg.InProgress(); err != nil {
					r.log.Warn("heartbeat failed; the message may be redelivered while it is worked on", attrs(msg, d, "err", err)...)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
