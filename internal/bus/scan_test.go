package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/internal/bus"
	"kvlive/internal/testenv"
)

// TestReadsLeaveNoIdleConsumers: the ordered consumer of every read (a
// scan, a tail) goes from the server soon after it is last pulled from,
// not after nats.go's five minutes: reads made every second would
// otherwise fill the stream's 1,000 consumers and refuse the next one.
func TestReadsLeaveNoIdleConsumers(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "READS", Subjects: []string{"reads.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "reads.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, filter := range []string{"reads.a", "reads.none"} {
		if err := bus.Scan(ctx, js, "READS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}, func(jetstream.Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	tail := bus.NewTail(js, "READS", jetstream.OrderedConsumerConfig{})
	tctx, cancel := context.WithCancel(ctx)
	if _, err := tail.Next(tctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	cancel()
	tail.Stop()
	s, err := js.Stream(ctx, "READS")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for info := range s.ListConsumers(ctx).Info() {
		n++
		if info.Config.InactiveThreshold > bus.ReadInactive {
			t.Errorf("consumer %s stays %s once idle, want at most %s", info.Name, info.Config.InactiveThreshold, bus.ReadInactive)
		}
	}
	if n == 0 {
		t.Fatal("no consumer listed; the test checks nothing")
	}
}
