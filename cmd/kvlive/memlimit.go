package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"k8s.io/apimachinery/pkg/util/wait"
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

// kvlive run's garbage collection targets when the environment sets no
// GOGC. Most of its heap is the informers' caches, which live as long as
// the process; at Go's default of 100 the heap grows to twice what is live
// before each collection, so an idle kvlive would hold as much again as
// its caches in memory it does not use. While idle it collects at
// idleGCPercent, the heap growing by a quarter; while its applier moves
// VMs, at busyGCPercent, since a rollout allocates fast and collections
// four times as often cost it a fifth of its CPU (docs/performance.md
// measures both).
const (
	idleGCPercent = 25
	busyGCPercent = 100
)

// gcFollowEvery is how often followActivity looks at the applier.
const gcFollowEvery = time.Second

// setGCPercent sets the garbage collection target to idleGCPercent and
// returns true, unless GOGC is in the environment, which wins (GOGC=off
// included, and an empty GOGC, which the runtime reads as 100): then it
// changes nothing and returns false. kvlive run calls it once its caches
// have synced.
func setGCPercent(log *slog.Logger) bool {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Debug("garbage collection target from GOGC", "GOGC", v)
		return false
	}
	debug.SetGCPercent(idleGCPercent)
	return true
}

// followActivity sets the garbage collection target to busyGCPercent
// while moving reports true and back to idleGCPercent once it reports
// false, looking every interval until ctx ends. Each time the process
// goes quiet after moving VMs, the applier idle and nothing of the move
// left settling (its verdicts stored and its revisions pruned: both come
// after a rollout's last move), it also collects and hands the freed pages
// back to the OS at once (debug.FreeOSMemory): a rollout's garbage,
// collected at the busy target, would otherwise stay in RSS until the
// runtime's scavenger returns it, minutes later (a 1,000-VM fleet held
// 94 MiB RSS after two rollouts with a live heap of 13;
// docs/performance.md). It does so again after the records keeper marks
// a rollout settled (settled reports it, once), which it does a minute or
// more after the rollout's last move, having read all of its outcomes.
// Settling without a move forces nothing: the pruner looks at every VM
// that changes, and comes and goes with a cluster whose VMs change often.
func followActivity(ctx context.Context, log *slog.Logger, moving, settling, settled func() bool, interval time.Duration) {
	current, moved := idleGCPercent, false
	wait.UntilWithContext(ctx, func(context.Context) {
		busy := moving()
		marked := settled() // asked every look: it reports a mark once
		want := idleGCPercent
		if busy {
			want = busyGCPercent
		}
		if want != current {
			debug.SetGCPercent(want)
			log.Debug("garbage collection target follows the applier", "GOGC", want, "moving", busy)
			current = want
		}
		moved = moved || busy || marked
		if moved && !busy && !settling() {
			debug.FreeOSMemory()
			log.Debug("quiet after a move or a rollout settled: the freed heap handed back to the OS")
			moved = false
		}
	}, interval)
}
