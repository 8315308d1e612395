package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// followRetry is how often Follow looks again for a stream it cannot
// follow yet.
const followRetry = time.Second

// Follow calls each with the subject of every message stored on stream
// from now on (headers only, through an ordered consumer, which nats.go
// re-creates when the server loses it) until ctx ends, and started once it
// follows or first failed to. A stream not made yet is looked for every
// second (said once in log, as who waits for what) and then followed from
// its first message: all of it is new to the caller.
func Follow(ctx context.Context, js jetstream.JetStream, stream, who string, log *slog.Logger, started func(), each func(subject string)) {
	once := sync.OnceFunc(started)
	defer once()
	deliver, said := jetstream.DeliverNewPolicy, false
	for ctx.Err() == nil {
		c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: deliver, HeadersOnly: true})
		if err == nil {
			var cc jetstream.ConsumeContext
			cc, err = c.Consume(func(m jetstream.Msg) { each(m.Subject()) })
			if err == nil {
				once()
				<-ctx.Done()
				cc.Stop()
				return
			}
		}
		level := slog.LevelWarn
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			deliver, level = jetstream.DeliverAllPolicy, slog.LevelInfo
		}
		if !said {
			log.Log(ctx, level, who+" waits for a stream", "stream", stream, "err", err, "retry", followRetry)
			said = true
		}
		once()
		select {
		case <-ctx.Done():
		case <-time.After(followRetry):
		}
	}
}
