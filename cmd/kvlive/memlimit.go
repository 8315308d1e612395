package main

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of the container's memory limit the Go
// runtime is held to, leaving room for what it does not count (goroutine
// stacks outside the heap's budget, the binary, the kernel's page cache).
const memoryLimitRatio = 0.9

// setMemoryLimit sets the Go runtime's memory limit to memoryLimitRatio of
// what provider reports (the container's cgroup limit), so the garbage
// collector works harder before the kernel's OOM killer would act. A
// GOMEMLIMIT in the environment, or AUTOMEMLIMIT=off, wins; no limit sets
// none. It returns the limit now in force.
func setMemoryLimit(log *slog.Logger, provider memlimit.Provider) (int64, error) {
	return memlimit.Set(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(provider), memlimit.WithLogger(log))
}

// gcPercent is kvlive run's garbage collection target when the
// environment sets no GOGC. Most of its heap is the informers' caches,
// which live as long as the process; at Go's default of 100 the heap grows
// to twice what is live before each collection, so an idle kvlive holds as
// much again as its caches in memory it does not use. At 25 it grows by a
// quarter: collections come four times as often while a rollout
// allocates, a few percent of kvlive's CPU (docs/performance.md measures
// both). Prometheus lowers its default the same way, to 75.
const gcPercent = 25

// setGCPercent sets the garbage collection target to gcPercent unless
// GOGC is in the environment, which wins (GOGC=off included), and returns
// the target now in force.
func setGCPercent(log *slog.Logger) int {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Debug("garbage collection target from GOGC", "GOGC", v)
		percent := debug.SetGCPercent(-1)
		debug.SetGCPercent(percent)
		return percent
	}
	debug.SetGCPercent(gcPercent)
	return gcPercent
}
