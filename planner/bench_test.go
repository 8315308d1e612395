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
