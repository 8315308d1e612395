package kube_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

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

// TestOwnedRevisionsOfOneVMOnly: VMs whose UIDs fall in one owner-index
// bucket each own only their revisions, and a VM without any owns none.
func TestOwnedRevisionsOfOneVMOnly(t *testing.T) {
	small, medium := testenv.ClusterInstancetype("u1.small", 1, "2Gi"), testenv.ClusterInstancetype("u1.medium", 2, "4Gi")
	var kubeObjs []runtime.Object
	virtObjs := []runtime.Object{small, medium}
	want := map[string][]string{}
	uids := map[string][]types.UID{} // by bucket, until one holds three
	var shared []types.UID
	for i := 0; len(shared) < 3; i++ {
		uid := types.UID(fmt.Sprintf("uid-%d", i))
		b := kube.OwnerBucket(uid)
		uids[b] = append(uids[b], uid)
		shared = uids[b]
	}
	for i, name := range []string{"a", "b", "c"} {
		vm := testenv.VM("ns", name, medium.Name)
		vm.UID = shared[i] // one bucket
		for _, it := range []runtime.Object{small, medium} {
			cr := testenv.Pin(t, vm, it)
			kubeObjs = append(kubeObjs, cr)
			want[string(vm.UID)] = append(want[string(vm.UID)], cr.Name)
		}
		virtObjs = append(virtObjs, vm)
	}
	c := testenv.StartCache(t, testenv.FakeClients(kubeObjs, virtObjs...))
	for uid, names := range map[string][]string{string(shared[0]): want[string(shared[0])], string(shared[1]): want[string(shared[1])],
		string(shared[2]): want[string(shared[2])], "uid-none": nil} {
		var got []string
		for _, cr := range c.OwnedRevisions(uid) {
			got = append(got, cr.Name)
		}
		slices.Sort(got)
		slices.Sort(names)
		if !slices.Equal(got, names) {
			t.Errorf("VM %s owns %v, want %v", uid, got, names)
		}
	}
}

// TestOwnerBucketsSpreadSeededUIDs: UIDs that share a long prefix (the
// demo seeds its VMs' UIDs so) spread over the owner index's buckets as
// random ones do, so no lookup reads the whole fleet's revisions.
func TestOwnerBucketsSpreadSeededUIDs(t *testing.T) {
	buckets := map[string]int{}
	for i := range 4096 {
		buckets[kube.OwnerBucket(types.UID(fmt.Sprintf("0a0a0a0a-0000-4000-8000-%012d", i)))]++
	}
	largest := 0
	for _, n := range buckets {
		largest = max(largest, n)
	}
	if len(buckets) < 2000 || largest > 16 {
		t.Errorf("4,096 seeded UIDs fill %d buckets, the largest with %d", len(buckets), largest)
	}
}
