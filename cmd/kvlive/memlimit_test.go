package main

import (
	"log/slog"
	"math"
	"os"
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

// TestGCPercentDefaultsLowerUnlessGOGCIsSet: kvlive run collects at
// gcPercent unless GOGC is in the environment, which it leaves as the
// runtime read it.
func TestGCPercentDefaultsLowerUnlessGOGCIsSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	log := slog.New(slog.DiscardHandler)

	t.Setenv("GOGC", "") // restored when the test ends
	os.Unsetenv("GOGC")
	if got := setGCPercent(log); got != gcPercent || debug.SetGCPercent(100) != gcPercent {
		t.Errorf("no GOGC: target %d, want %d", got, gcPercent)
	}

	t.Setenv("GOGC", "100")
	if got := setGCPercent(log); got != 100 || debug.SetGCPercent(100) != 100 {
		t.Errorf("GOGC=100: target %d, want the runtime's 100 untouched", got)
	}
}
