package consumer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkRunThroughput: messages settled per second by the runtime with
// 16 workers and a handler that returns at once (the runtime's own cost:
// fetching, heartbeats, acks), and one that takes 2 ms (a handler that
// waits on the API server).
func BenchmarkRunThroughput(b *testing.B) {
	for _, work := range []time.Duration{0, 2 * time.Millisecond} {
		b.Run(fmt.Sprintf("handler=%s", work), func(b *testing.B) {
			js, _ := startJetStream(b, 0, false)
			cons := workStream(b, js, 30*time.Second)
			r, _, _ := testRuntime(b, js, func(c *Config) { c.Consumer, c.Workers = cons, 16 })
			bodies := make([]string, b.N)
			for i := range bodies {
				bodies[i] = fmt.Sprint(i)
			}
			publish(b, js, bodies...)
			var handled atomic.Int64
			done := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			b.ResetTimer()
			errc := runInBackground(ctx, r, func(context.Context, jetstream.Msg, Delivery) Fate {
				time.Sleep(work)
				if handled.Add(1) == int64(b.N) {
					close(done)
				}
				return Done()
			})
			<-done
			b.StopTimer()
			cancel()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
