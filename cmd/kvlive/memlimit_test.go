package main

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// TestMemoryLimitFollowsTheContainer: a 2 GiB container limit holds the Go
// runtime to 90% of it; a GOMEMLIMIT given in the environment is left as
// it is.
func TestMemoryLimitFollowsTheContainer(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	log := slog.New(slog.DiscardHandler)

	t.Setenv("GOMEMLIMIT", "")
	got, err := setMemoryLimit(log, memlimit.Limit(2<<30))
	ratio := memoryLimitRatio
	if want := int64(float64(2<<30) * ratio); err != nil || got != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("2 GiB limit: set %d (%v), runtime %d; want %d", got, err, debug.SetMemoryLimit(-1), want)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	if _, err := setMemoryLimit(log, memlimit.Limit(2<<30)); err != nil || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: runtime %d (%v), want it untouched", debug.SetMemoryLimit(-1), err)
	}
}
