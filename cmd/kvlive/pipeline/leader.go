package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"kvlive/internal/kube"
	"kvlive/watcher"
)

// LeaderElection runs the watcher stage in one replica at a time: the one
// holding a coordination.k8s.io Lease. Planners and appliers need none;
// they share JetStream's durable consumers. The fields mirror kube
// components' --leader-elect-* flags.
type LeaderElection struct {
	// Namespace and Name locate the Lease; Identity names this replica.
	Namespace, Name, Identity string
	// LeaseDuration is how long others wait after the last renewal before
	// taking over; RenewDeadline how long the leader retries renewing before
	// it gives up; RetryPeriod how often both try.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultLeaderElection holds the Lease kvlive-watcher with client-go's
// customary timings; Namespace and Identity are left to the caller.
func DefaultLeaderElection() LeaderElection {
	return LeaderElection{Name: "kvlive-watcher", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// runLeading campaigns for the Lease until ctx ends. Each term runs a fresh
// watcher until leadership is lost or ctx ends, and the Lease is released
// (on shutdown) only once that watcher has stopped, so two replicas' watchers
// never overlap. A watcher that fails while leading ends the stage.
func runLeading(ctx context.Context, cfg Config, fleet *kube.Cache, current *atomic.Pointer[watcher.Watcher]) error {
	le := cfg.LeaderElection
	if le.Namespace == "" || le.Identity == "" {
		return errors.New("pipeline: leader election needs a namespace and an identity")
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     cfg.Clients.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	log := cfg.Log.With("lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
	for ctx.Err() == nil {
		if err := campaign(ctx, cfg, fleet, lock, log, current); err != nil {
			return err
		}
	}
	return nil
}

// campaign runs one election: it returns once this replica has led and
// stopped leading (its watcher stopped), or ctx ended while campaigning.
func campaign(ctx context.Context, cfg Config, fleet *kube.Cache, lock resourcelock.Interface, log *slog.Logger, current *atomic.Pointer[watcher.Watcher]) error {
	le := cfg.LeaderElection
	// The elector's context ends only after the term's watcher stopped, so
	// ReleaseOnCancel never hands the Lease over under a running watcher.
	elect, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	// acquired is set by the lock the moment this replica takes the Lease:
	// from then on the elector has started (or will start) a term, which
	// campaign must wait for even if the elector returns first.
	tracked := &acquiredLock{Interface: lock, identity: le.Identity}
	term := make(chan error, 1)
	unhook := context.AfterFunc(ctx, func() {
		if !tracked.acquired.Load() {
			stopElecting() // still campaigning: nothing to wait for
		}
	})
	defer unhook()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            tracked,
		Name:            le.Name,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks:       callbacks(ctx, cfg, fleet, log, current, tracked, term, stopElecting),
	})
	if err != nil {
		return fmt.Errorf("pipeline: leader election: %w", err)
	}
	elector.Run(elect) // returns when leadership is lost or elect ends
	if !tracked.acquired.Load() {
		return nil
	}
	return <-term
}

// callbacks run a term of the watcher while this replica leads: the term
// ends with leadership or ctx, its error (not the end of the term) goes
// to term, and the election stops with it.
func callbacks(ctx context.Context, cfg Config, fleet *kube.Cache, log *slog.Logger, current *atomic.Pointer[watcher.Watcher],
	tracked *acquiredLock, term chan<- error, stopElecting func()) leaderelection.LeaderCallbacks {
	return leaderelection.LeaderCallbacks{
		OnStartedLeading: func(leading context.Context) {
			log.Info("leading: the watcher starts")
			run, stop := context.WithCancel(leading)
			stopWithCtx := context.AfterFunc(ctx, stop)
			err := runTerm(run, cfg, fleet, current)
			stopWithCtx()
			stop()
			if leading.Err() != nil || ctx.Err() != nil {
				err = nil // the term ended, not the watcher
			}
			term <- err
			stopElecting()
		},
		OnStoppedLeading: func() {
			if tracked.acquired.Load() {
				log.Info("not leading: the watcher stopped")
			}
		},
		OnNewLeader: func(identity string) {
			if identity != cfg.LeaderElection.Identity {
				log.Info("another replica leads the watcher", "leader", identity)
			}
		},
	}
}

// acquiredLock notes whether its holder ever wrote itself into the Lease.
type acquiredLock struct {
	resourcelock.Interface
	identity string
	acquired atomic.Bool
}

func (l *acquiredLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	l.note(r, err)
	return err
}

func (l *acquiredLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	l.note(r, err)
	return err
}

func (l *acquiredLock) note(r resourcelock.LeaderElectionRecord, err error) {
	if err == nil && r.HolderIdentity == l.identity {
		l.acquired.Store(true)
	}
}

// runTerm runs one term's watcher (and pruner) until ctx ends.
func runTerm(ctx context.Context, cfg Config, fleet *kube.Cache, current *atomic.Pointer[watcher.Watcher]) error {
	w, err := newWatcher(cfg, fleet)
	if err != nil {
		return err
	}
	current.Store(w)
	defer current.Store(nil)
	return runWatcher(ctx, cfg, fleet, w)
}

func newWatcher(cfg Config, fleet *kube.Cache) (*watcher.Watcher, error) {
	return watcher.New(watcher.Config{Informers: fleet.ObjectInformers(), JetStream: cfg.JetStream, Namespace: cfg.Namespace, Log: cfg.Log, Tracer: cfg.Tracer})
}
