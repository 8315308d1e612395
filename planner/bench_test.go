package planner

import (
	"fmt"
	"testing"

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
