package planner

import (
	"fmt"
	"testing"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// BenchmarkPlanEvent plans one event referencing 1%, 10% and 100% of
// 10,000 and 100,000 cached VMs (half of them running): the index lookup
// plus one plan per VM, as the planner stage does before publishing. Time
// should follow the referencing VMs, not the fleet.
func BenchmarkPlanEvent(b *testing.B) {
	for _, cached := range []int{10_000, 100_000} {
		for _, percent := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("cached=%d/referencing=%d%%", cached, percent), func(b *testing.B) {
				testenv.NewPlanFleet(b, cached, cached*percent/100).PlanEvent(b)
			})
		}
	}
}

// BenchmarkSupersede is a freshly started planner's look at an edited
// object's older rollouts, 1 and 10 of them settled with 2,000 outcomes
// each: its cost should not grow with them.
func BenchmarkSupersede(b *testing.B) {
	for _, older := range []int{1, 10} {
		b.Run(fmt.Sprintf("older=%d", older), func(b *testing.B) {
			js := testenv.JetStream(b)
			storeSettled(b, js, older, 2000)
			cfg := Config{Fleet: testenv.StartCache(b, testenv.FakeClients(nil)), JetStream: js}
			for b.Loop() {
				p, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.supersede(b.Context(), edit(int64(older)+1)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPublishPlans publishes 1,000 plans to the plans stream (an
// embedded nats-server, file storage) and waits for the server's
// acknowledgement of every one: as one fast batch, and one by one, as on
// a stream without fast batches. Each round's plans are new (their own
// event), and the stream is emptied between rounds, untimed.
func BenchmarkPublishPlans(b *testing.B) {
	for _, batched := range []bool{true, false} {
		b.Run(map[bool]string{true: "batch", false: "one-by-one"}[batched], func(b *testing.B) {
			js := testenv.JetStream(b)
			if !batched {
				takeNoBatches(b, js, events.StreamPlans)
			}
			stream, err := js.Stream(b.Context(), events.StreamPlans)
			if err != nil {
				b.Fatal(err)
			}
			p := newPlanner(b, js)
			plans := batchPlans(1000)
			for i := range plans {
				plans[i].Batch = 0
			}
			for gen := int64(1); b.Loop(); gen++ {
				w := edit(gen)
				for i := range plans {
					plans[i].EventID = w.eventID
				}
				if err := p.publishPlans(b.Context(), w, plans); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := stream.Purge(b.Context()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
