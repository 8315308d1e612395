package main

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

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
// idleGCPercent unless GOGC is in the environment, which it leaves as the
// runtime read it (and then does not follow the applier).
func TestGCPercentDefaultsLowerUnlessGOGCIsSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	log := slog.New(slog.DiscardHandler)

	t.Setenv("GOGC", "") // restored when the test ends
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	if follow := setGCPercent(log); !follow || debug.SetGCPercent(100) != idleGCPercent {
		t.Errorf("no GOGC: follow %v, target not %d", follow, idleGCPercent)
	}

	t.Setenv("GOGC", "100")
	if follow := setGCPercent(log); follow || debug.SetGCPercent(100) != 100 {
		t.Errorf("GOGC=100: follow %v, want the runtime's 100 untouched", follow)
	}
}

// TestGCTargetFollowsTheApplier: the target is busyGCPercent while the
// applier moves VMs and idleGCPercent again once it stops, and going quiet
// (the applier stopped, no verdict awaited) returns the freed heap to the
// OS (a forced collection, which debug.FreeOSMemory makes).
func TestGCTargetFollowsTheApplier(t *testing.T) {
	var moving, settling, settled atomic.Bool
	followInTest(t, moving.Load, settling.Load, settled.Load)
	wait := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for gcTarget() != want {
			if time.Now().After(deadline) {
				t.Fatalf("target %d after 10s, want %d", gcTarget(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	moving.Store(true)
	wait(busyGCPercent)
	busy := forced()
	moving.Store(false)
	wait(idleGCPercent)
	waitForced(t, busy, "going idle")

	// A rollout's last verdicts come after its last move: the freed heap
	// is handed back again once they are stored, not only when the
	// applier stops.
	settling.Store(true)
	moving.Store(true)
	wait(busyGCPercent)
	moving.Store(false)
	wait(idleGCPercent)
	time.Sleep(50 * time.Millisecond) // many looks, every one settling
	awaiting := forced()
	settling.Store(false)
	waitForced(t, awaiting, "the last verdict stored")
}

// TestSettlingWithoutAMoveForcesNothing: the pruner comes and goes with
// a cluster whose VMs change often, so the process is settling and not by
// turns, look after look, without moving a VM; that forces no collection.
// The next move's quiet spell does, once.
func TestSettlingWithoutAMoveForcesNothing(t *testing.T) {
	var moving, settling, settled atomic.Bool
	var looks atomic.Int64
	followInTest(t, func() bool {
		looks.Add(1)
		return moving.Load()
	}, settling.Load, settled.Load)

	start, began := forced(), time.Now()
	for from := looks.Load(); looks.Load()-from < 200; time.Sleep(time.Millisecond) {
		if time.Since(began) > time.Minute {
			t.Fatalf("%d looks in a minute, want 200", looks.Load()-from)
		}
		settling.Store(!settling.Load())
	}
	if n := forced() - start; n != 0 {
		t.Errorf("%d forced collections over 200 looks of settling without a move, want none", n)
	}
	settling.Store(false)
	moving.Store(true)
	for deadline := time.Now().Add(10 * time.Second); gcTarget() != busyGCPercent; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the applier's move not seen in 10s")
		}
	}
	moving.Store(false)
	waitForced(t, start, "the quiet spell after a move")
}

// TestARolloutSettledHandsTheHeapBack: the records keeper marks a rollout
// settled a minute or more after its last move, having read all of its
// outcomes; the mark hands the freed heap back to the OS too, once the
// process is quiet (no verdict awaited), once a mark.
func TestARolloutSettledHandsTheHeapBack(t *testing.T) {
	var moving, settling, marked atomic.Bool
	var looks atomic.Int64
	followInTest(t, moving.Load, settling.Load, func() bool {
		looks.Add(1)
		return marked.Swap(false)
	})
	lookOn := func(n int64) {
		t.Helper()
		began := time.Now()
		for from := looks.Load(); looks.Load()-from < n; time.Sleep(time.Millisecond) {
			if time.Since(began) > time.Minute {
				t.Fatalf("%d looks in a minute, want %d", looks.Load()-from, n)
			}
		}
	}

	start := forced()
	lookOn(100)
	if n := forced() - start; n != 0 {
		t.Errorf("%d forced collections while idle with nothing marked, want none", n)
	}
	settling.Store(true)
	marked.Store(true)
	lookOn(100) // the mark is taken at the first
	if n := forced() - start; n != 0 || marked.Load() {
		t.Errorf("%d forced collections while a verdict is awaited (mark taken: %v), want none yet", n, !marked.Load())
	}
	settling.Store(false)
	waitForced(t, start, "the rollout marked settled")
	after := forced()
	lookOn(100)
	if n := forced() - after; n != 0 {
		t.Errorf("%d more forced collections after the one the mark asked for, want none", n)
	}
}

// followInTest runs followActivity, looking every millisecond, from the
// idle target until the test ends, then restores the target the process
// had.
func followInTest(t *testing.T, moving, settling, settled func() bool) {
	before := debug.SetGCPercent(idleGCPercent)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		followActivity(ctx, slog.New(slog.DiscardHandler), moving, settling, settled, time.Millisecond)
	}()
	// Cleanups run last first: the follower stops before the target is restored.
	t.Cleanup(func() { cancel(); <-done })
}

// gcTarget reads the garbage collection target (read, not set and
// restored, as followActivity sets it).
func gcTarget() int {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	return int(sample[0].Value.Uint64())
}

// forced is how many collections the process was made to run (by
// debug.FreeOSMemory, or runtime.GC).
func forced() uint64 {
	sample := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// waitForced waits up to 10 s for a collection forced after the count
// after, failing the test saying when one was due.
func waitForced(t *testing.T, after uint64, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); forced() == after; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s forced no collection in 10s: the freed heap stays in RSS", what)
		}
	}
}
