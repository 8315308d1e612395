package main

import (
	"log/slog"

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
