package pipeline_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/cmd/kvlive/pipeline"
	"kvlive/internal/testenv"
)

// TestLeaseChangesHandsOnShutdown runs two watcher-only pipelines on one
// cluster with leader election: one holds the Lease; when it shuts down it
// releases the Lease (its watcher stopped first), and the other takes over
// without waiting for the Lease to lapse.
func TestLeaseChangesHandsOnShutdown(t *testing.T) {
	clients := testenv.FakeClients(nil, fleet()...)
	js := testenv.JetStream(t)
	leases := clients.Kube.CoordinationV1().Leases("kvlive")
	holder := func() string {
		l, err := leases.Get(context.Background(), "kvlive-watcher", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	run := func(id string) (context.CancelFunc, *pipeline.Running) {
		le := pipeline.DefaultLeaderElection()
		// A Lease that would take an hour to lapse: only a release hands it
		// over within the test's wait.
		le.Namespace, le.Identity, le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = "kvlive", id, time.Hour, 50*time.Minute, 100*time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		r, err := pipeline.Start(ctx, pipeline.Config{Clients: clients, JetStream: js, Stages: []string{pipeline.StageWatcher}, LeaderElection: &le})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cancel()
			_ = r.Wait()
		})
		return cancel, r
	}
	stopA, a := run("a")
	testenv.Eventually(t, time.Minute, "a to hold the Lease", func() bool { return holder() == "a" })
	run("b")
	stopA()
	if err := a.Wait(); err != nil {
		t.Fatalf("a: %v", err)
	}
	testenv.Eventually(t, time.Minute, "b to take the released Lease over", func() bool { return holder() == "b" })
}
