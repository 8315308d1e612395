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
	before := debug.SetGCPercent(idleGCPercent)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	var moving, settling atomic.Bool
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		followActivity(ctx, slog.New(slog.DiscardHandler), moving.Load, settling.Load, time.Millisecond)
	}()
	// Cleanups run last first: the follower stops before the target is restored.
	t.Cleanup(func() { cancel(); <-done })
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

// TestQuietSpellsForceACollectionAtMostEveryThirtyLooks: a pruner coming
// and going with VMs that change often makes the process quiet and
// settling by turns, look after look; the freed heap is handed back at
// most once every freeEveryLooks looks, not at every quiet spell, and
// what is owed is still handed back once the process stays quiet.
func TestQuietSpellsForceACollectionAtMostEveryThirtyLooks(t *testing.T) {
	before := debug.SetGCPercent(idleGCPercent)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	var settling atomic.Bool
	const interval = time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		followActivity(ctx, slog.New(slog.DiscardHandler), func() bool { return false }, settling.Load, interval)
	}()
	t.Cleanup(func() { cancel(); <-done })

	start, began := forced(), time.Now()
	for range 300 {
		settling.Store(!settling.Load())
		time.Sleep(interval)
	}
	settling.Store(true)
	spells := time.Since(began)
	// One at the first quiet look, then one per freeEveryLooks looks at
	// most, counted in time: a slow machine looks less often, never more.
	if n, most := forced()-start, uint64(spells/(freeEveryLooks*interval))+2; n > most {
		t.Errorf("%d forced collections in %v of quiet spells, want at most %d (one every %d looks)", n, spells, most, freeEveryLooks)
	}
	time.Sleep(2 * freeEveryLooks * interval)
	owed := forced()
	settling.Store(false)
	waitForced(t, owed, "staying quiet")
}

// TestAMoveIsHandedBackAtOnce: a quiet spell after the applier moved VMs
// hands the freed heap back at the first quiet look, however few looks
// ago the last forced collection was; only settling alone waits
// freeEveryLooks looks. Counted in looks, not time.
func TestAMoveIsHandedBackAtOnce(t *testing.T) {
	before := debug.SetGCPercent(idleGCPercent)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	var moving atomic.Bool
	var looks atomic.Int64 // quiet looks: settling is asked only when not moving
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		followActivity(ctx, slog.New(slog.DiscardHandler), moving.Load, func() bool { looks.Add(1); return false }, time.Millisecond)
	}()
	t.Cleanup(func() { cancel(); <-done })
	move := func() {
		t.Helper()
		moving.Store(true)
		for deadline := time.Now().Add(10 * time.Second); gcTarget() != busyGCPercent; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the applier's move not seen in 10s")
			}
		}
		moving.Store(false)
	}
	count := forced()
	move()
	waitForced(t, count, "the first move")
	quietFrom, count := looks.Load(), forced()
	move()
	waitForced(t, count, "a second move")
	if n := looks.Load() - quietFrom; n > freeEveryLooks/3 {
		t.Errorf("the heap went back %d quiet looks after the last forced collection, want at the first after the second move", n)
	}
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
