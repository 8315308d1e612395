package pruner_test

import (
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/pruner"
)

// TestBacklogCountsTheVMsLeftToPrune: while kvlive moves VMs the pruner
// holds what it has to look at, and Backlog says so (kvlive run counts it
// as settling, and exports it as kvlive_queue_depth{queue="pruner"}); once
// the applier is idle the superseded revisions go, and the backlog is 0.
func TestBacklogCountsTheVMsLeftToPrune(t *testing.T) {
	owned, clients := historyClients(t)
	var moving atomic.Bool
	moving.Store(true)
	p, err := pruner.New(pruner.Config{Fleet: testenv.StartCache(t, clients), Retention: 0, Busy: moving.Load, MaxYield: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n := p.Backlog(); n != 0 {
		t.Fatalf("backlog %d before Run, want 0", n)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(t.Context()) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	testenv.Eventually(t, time.Minute, "the VM to be held while VMs are moved", func() bool { return p.Backlog() > 0 })
	// Held, not pruned: every revision is still there.
	if n := revisions(t, clients); n != len(owned) {
		t.Fatalf("%d revisions left while VMs are moved, want all %d", n, len(owned))
	}
	moving.Store(false)
	testenv.Eventually(t, time.Minute, "the backlog to drain once the applier is idle", func() bool { return p.Backlog() == 0 })
	if n := revisions(t, clients); n != len(owned)-4 {
		t.Errorf("%d revisions left with the backlog drained, want %d: the 4 superseded ones pruned", n, len(owned)-4)
	}
}

// revisions counts the ControllerRevisions in namespace ns.
func revisions(t *testing.T, clients kube.Clients) int {
	t.Helper()
	list, err := clients.Kube.AppsV1().ControllerRevisions("ns").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// historyClients serves history's VM and the revisions it owns from fake
// clientsets.
func historyClients(t *testing.T) ([]*appsv1.ControllerRevision, kube.Clients) {
	t.Helper()
	vm, owned := history(t)
	var crs []runtime.Object
	for _, cr := range owned {
		crs = append(crs, cr)
	}
	return owned, testenv.FakeClients(crs, vm)
}
