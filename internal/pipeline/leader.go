package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

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

// runLeading campaigns for the Lease until ctx ends. Each time this
// replica leads, a fresh watcher runs until leadership is lost; a watcher
// that fails while leading ends the stage with its error.
func runLeading(ctx context.Context, cfg Config, current *atomic.Pointer[watcher.Watcher]) error {
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
	failed := make(chan error, 1)
	for ctx.Err() == nil {
		campaign, stop := context.WithCancel(ctx)
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            le.Name,
			LeaseDuration:   le.LeaseDuration,
			RenewDeadline:   le.RenewDeadline,
			RetryPeriod:     le.RetryPeriod,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leading context.Context) {
					log.Info("leading: the watcher starts")
					w, err := newWatcher(cfg)
					if err == nil {
						current.Store(w)
						err = w.Run(leading)
						current.Store(nil)
					}
					if err != nil && leading.Err() == nil {
						failed <- err
						stop()
					}
				},
				OnStoppedLeading: func() { log.Info("not leading: the watcher stops") },
				OnNewLeader: func(identity string) {
					if identity != le.Identity {
						log.Info("another replica leads the watcher", "leader", identity)
					}
				},
			},
		})
		if err != nil {
			stop()
			return fmt.Errorf("pipeline: leader election: %w", err)
		}
		elector.Run(campaign) // returns when leadership is lost or ctx ends
		stop()
		select {
		case err := <-failed:
			return err
		default:
		}
	}
	return nil
}

func newWatcher(cfg Config) (*watcher.Watcher, error) {
	return watcher.New(watcher.Config{Clients: cfg.Clients, JetStream: cfg.JetStream, Namespace: cfg.Namespace, Log: cfg.Log, Tracer: cfg.Tracer})
}
