package kube_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// TestStartCacheForReadsOnlyInvolvedRevisions: a cache started for the
// objects a plan involves holds their VMs' revisions and none of the
// others, and asks what is involved only once the VMs are listed.
func TestStartCacheForReadsOnlyInvolvedRevisions(t *testing.T) {
	medium, other := testenv.ClusterInstancetype("u1.medium", 2, "4Gi"), testenv.ClusterInstancetype("unrelated", 1, "1Gi")
	vm, bystander := testenv.VM("ns", "vm", medium.Name), testenv.VM("ns", "bystander", other.Name)
	pinned, unrelated := testenv.Pin(t, vm, medium), testenv.Pin(t, bystander, other)
	clients := testenv.FakeClients([]runtime.Object{pinned, unrelated}, medium, other, vm, bystander)
	var sawVMs []string
	c, stop, err := kube.StartCacheFor(context.Background(), clients, "", time.Minute, func(c *kube.Cache) []string {
		for _, vm := range c.VMs("", nil) {
			sawVMs = append(sawVMs, vm.Name)
		}
		return []string{medium.Name}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	slices.Sort(sawVMs)
	if !slices.Equal(sawVMs, []string{"bystander", "vm"}) {
		t.Errorf("involved saw VMs %v, want both: it is asked once the VMs are listed", sawVMs)
	}
	if _, ok := c.Revision("ns", pinned.Name); !ok {
		t.Errorf("the involved object's revision %s is not cached", pinned.Name)
	}
	if _, ok := c.Revision("ns", unrelated.Name); ok {
		t.Errorf("the unrelated revision %s is cached", unrelated.Name)
	}
}
