package standin

import (
	"context"
	"testing"
	"time"

	"kvlive/internal/testenv"
)

// TestSettledAfterPinning: a VM without pins is reconciled (pinned), and
// the stand-in then says it is idle and when it last reconciled, so the
// bench can time KubeVirt's reaction to a rollout.
func TestSettledAfterPinning(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.small", 1, "2Gi")
	clients := testenv.FakeClients(nil, it, testenv.VM("ns", "vm-1", it.Name))
	fleet := testenv.StartWholeCache(t, clients)
	c := New(Config{Kube: clients.Kube, Virt: clients.Virt, VMs: fleet.VMInformer(), VMIs: fleet.VMIInformer(), KubeVirts: fleet.KubeVirtInformer()})
	// Before Run nothing was reconciled; whether the VM is queued yet
	// depends on when the informer hands it over.
	if last, _ := c.Settled(); !last.Equal(time.Unix(0, 0)) {
		t.Fatalf("before Run: last reconciled at %v, want never", last)
	}
	runUntilCleanup(t, c)
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, "the VM pinned", func() bool {
		vm := fleet.VM("ns", "vm-1")
		return vm != nil && vm.Status.InstancetypeRef != nil && vm.Status.InstancetypeRef.ControllerRevisionRef != nil
	})
	testenv.Eventually(t, 10*time.Second, "the stand-in idle", func() bool {
		_, idle := c.Settled()
		return idle
	})
	if last, _ := c.Settled(); last.Before(start) || last.After(time.Now()) {
		t.Errorf("last reconciled at %v, want after %v and by now", last, start)
	}
}

// runUntilCleanup runs the stand-in until the test ends, failing the test
// if it returns an error.
func runUntilCleanup(t *testing.T, c *Controller) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stand-in: %v", err)
		}
	})
}
