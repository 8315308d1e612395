package kube_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	instancetypeapi "kubevirt.io/api/instancetype"

	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// TestStartCacheForReadsOnlyInvolvedRevisions: a cache started for the
// objects a plan involves holds their VMs' pinned revisions and none of
// the others: not an unrelated object's, not a superseded generation no
// VM is pinned to; it asks what is involved only once the VMs are listed;
// a pinned revision the selection misses (its name does not end in its
// generation label) is read by name, and a pin naming no revision stays
// missing.
func TestStartCacheForReadsOnlyInvolvedRevisions(t *testing.T) {
	medium, other := testenv.ClusterInstancetype("u1.medium", 2, "4Gi"), testenv.ClusterInstancetype("unrelated", 1, "1Gi")
	vm, odd, gone, bystander := testenv.VM("ns", "vm", medium.Name), testenv.VM("ns", "odd", medium.Name), testenv.VM("ns", "gone", medium.Name), testenv.VM("ns", "bystander", other.Name)
	medium.Generation = 1
	superseded := testenv.Pin(t, vm, medium)
	medium.Generation = 2
	pinned, unrelated := testenv.Pin(t, vm, medium), testenv.Pin(t, bystander, other)
	oddPin := testenv.Pin(t, odd, medium)
	oddPin.Name = strings.TrimSuffix(oddPin.Name, "-2") + "-9"
	oddPin.Labels[instancetypeapi.ControllerRevisionObjectGenerationLabel] = "5" // neither 2 nor 9
	odd.Status.InstancetypeRef.ControllerRevisionRef.Name = oddPin.Name
	_ = testenv.Pin(t, gone, medium) // never created
	clients := testenv.FakeClients([]runtime.Object{superseded, pinned, oddPin, unrelated}, medium, other, vm, odd, gone, bystander)
	var sawVMs []string
	c, stop, err := kube.StartCacheFor(context.Background(), clients, "", time.Minute, func(c *kube.Cache) instancetype.Involvement {
		var pins []string
		for _, vm := range c.VMs("", nil) {
			sawVMs = append(sawVMs, vm.Name)
			if vm.Spec.Instancetype.Name == medium.Name {
				pins = append(pins, vm.Namespace+"/"+vm.Status.InstancetypeRef.ControllerRevisionRef.Name)
			}
		}
		return instancetype.Involvement{Objects: []string{medium.Name}, Pins: pins}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	slices.Sort(sawVMs)
	if !slices.Equal(sawVMs, []string{"bystander", "gone", "odd", "vm"}) {
		t.Errorf("involved saw VMs %v, want all four: it is asked once the VMs are listed", sawVMs)
	}
	for name, want := range map[string]bool{pinned.Name: true, oddPin.Name: true, superseded.Name: false, unrelated.Name: false, gone.Status.InstancetypeRef.ControllerRevisionRef.Name: false} {
		if _, ok := c.Revision("ns", name); ok != want {
			t.Errorf("revision %s cached: %v, want %v", name, ok, want)
		}
	}
	gets := 0
	for _, a := range clients.Kube.(*kubefake.Clientset).Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "controllerrevisions" {
			gets++
		}
	}
	if gets != 2 {
		t.Errorf("%d GETs of revisions, want 2: the two pins the selection missed", gets)
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

// TestRevisionSelectorOfPinnedGenerations: the generations come from the
// pins' names as KubeVirt writes them; a name that does not end in one
// (or not in its plain form) narrows nothing, and neither do more
// generations than one selector holds.
func TestRevisionSelectorOfPinnedGenerations(t *testing.T) {
	kind, name, generation := "instancetype.kubevirt.io/object-kind", "instancetype.kubevirt.io/object-name", "instancetype.kubevirt.io/object-generation"
	many := make([]string, 201)
	for i := range many {
		many[i] = fmt.Sprintf("ns/vm-u1.medium-v1beta1-uid-%d", i)
	}
	for _, c := range []struct {
		pins []string
		want string
	}{
		{[]string{"ns/a-u1.medium-v1beta1-uid-3", "ns/b-u1.medium-v1beta1-uid-12", "other/c-u1.medium-v1beta1-uid-3"}, kind + "," + name + " in (u1.medium)," + generation + " in (12,3)"},
		{[]string{"ns/a-u1.medium-v1beta1-uid-3", "ns/restored"}, kind + "," + name + " in (u1.medium)"},
		{[]string{"ns/a-u1.medium-v1beta1-uid-03"}, kind + "," + name + " in (u1.medium)"},
		{nil, kind + "," + name + " in (u1.medium)"},
		{many, kind + "," + name + " in (u1.medium)"},
	} {
		if got := kube.RevisionsOf([]string{"u1.medium"}, kube.GenerationsOf(c.pins)); got != c.want {
			t.Errorf("pins %.80v: selector %q, want %q", c.pins, got, c.want)
		}
	}
}
