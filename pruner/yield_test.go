package pruner

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"kvlive/internal/testenv"
)

// TestPruningWaitsWhileVMsAreMoved: the pruner takes its next VM only once
// kvlive has stopped moving VMs, or once it has waited MaxYield, after
// which it goes on beside the rollout until kvlive is idle again.
func TestPruningWaitsWhileVMsAreMoved(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	p := &Pruner{cfg: Config{Busy: busy.Load, MaxYield: time.Hour, Log: slog.New(slog.DiscardHandler)}}
	done := make(chan struct{})
	go func() { p.yield(context.Background()); close(done) }()
	select {
	case <-done:
		t.Fatal("the pruner went on while VMs were being moved")
	case <-time.After(3 * yieldPoll):
	}
	busy.Store(false)
	testenv.Eventually(t, time.Minute, "the pruner to go on once kvlive is idle", closed(done))

	// A rollout longer than MaxYield: one wait, then no more until idle.
	busy.Store(true)
	p.cfg.MaxYield = 2 * yieldPoll
	start := time.Now()
	p.yield(context.Background())
	if waited := time.Since(start); waited < p.cfg.MaxYield {
		t.Fatalf("the pruner waited %v, want MaxYield (%v)", waited, p.cfg.MaxYield)
	}
	if !p.sharing {
		t.Fatal("past MaxYield the pruner does not say it shares the API server")
	}
	p.cfg.MaxYield = time.Hour
	returned := make(chan struct{})
	go func() { p.yield(context.Background()); close(returned) }()
	testenv.Eventually(t, time.Minute, "the pruner to go on beside the same rollout without waiting again", closed(returned))
	busy.Store(false)
	p.yield(context.Background())
	if p.sharing || !p.yielding.IsZero() {
		t.Fatal("an idle look did not reset the wait")
	}
}

// closed reports, each time it is called, whether ch has been closed.
func closed(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}
