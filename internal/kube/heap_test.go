package kube

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/instancetype"
)

// cachedFleet is what a trimmed cache's stores hold for a fleet: each VM
// (indexed as the cache indexes it), its VMI when running, and its
// instance type's ControllerRevision, each decoded apart from the others
// (as a list's items are) and passed through TrimUnread. After repins
// moves by kvlive each VM also has that many revisions kvlive created,
// each labelled as kvlive's and naming the one it superseded.
type cachedFleet struct {
	vms, vmis, revisions cache.Indexer
}

func newCachedFleet(tb testing.TB, n int, running func(i int) bool, repins int) *cachedFleet {
	tb.Helper()
	f := &cachedFleet{
		vms:       cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{RefIndex: indexRefs, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		vmis:      cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		revisions: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{OwnerIndex: indexOwner}),
	}
	it := &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "u1.medium", UID: "5c0e4c3a-1111-4e2a-9f1e-3d1a2b3c4d5e", Generation: 1},
		Spec:       v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 2}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("4Gi")}},
	}
	add := func(store cache.Indexer, obj any) {
		out, err := TrimUnread(obj)
		if err != nil {
			tb.Fatal(err)
		}
		if err := store.Add(out); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		name, uid := fmt.Sprintf("web-%d", i), string(uuid.NewUUID())
		vm := served[virtv1.VirtualMachine](tb, strings.NewReplacer("web-1", name, "0b7d3c9e-7c53-4b0e-9d47-7a5d2c1a0e11", uid).Replace(servedVM))
		cr, err := instancetype.NewRevision(vm, it)
		if err != nil {
			tb.Fatal(err)
		}
		for r := range repins + 1 {
			if r > 0 {
				edited := it.DeepCopy()
				edited.Generation += int64(r)
				supersedes := cr.Name
				if cr, err = instancetype.NewRevision(vm, edited); err != nil {
					tb.Fatal(err)
				}
				cr = instancetype.Kvlives(cr, supersedes)
			}
			raw, err := json.Marshal(cr)
			if err != nil {
				tb.Fatal(err)
			}
			add(f.revisions, served[appsv1.ControllerRevision](tb, string(raw)))
		}
		add(f.vms, vm)
		if running(i) {
			add(f.vmis, served[virtv1.VirtualMachineInstance](tb, strings.ReplaceAll(servedVMI, "web-1", name)))
		}
	}
	return f
}

// heapOf is the live heap what build returns holds.
func heapOf[T any](build func() T) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
}

// BenchmarkCachedHeapPerVM measures what a trimmed cache holds per VM:
// stopped VMs with their revisions, three running in four with their
// VMIs, and stopped VMs re-pinned twice by kvlive (go test -bench
// CachedHeap -benchtime 1x ./internal/kube/).
func BenchmarkCachedHeapPerVM(b *testing.B) {
	const n = 20000
	for _, c := range []struct {
		name    string
		running func(int) bool
		repins  int
	}{
		{"stopped", func(int) bool { return false }, 0},
		{"three-in-four-running", func(i int) bool { return i%4 != 0 }, 0},
		// What the bench's stopped section leaves at the default
		// retention: KubeVirt's first revision, the one kvlive's last
		// move superseded and the one it pinned.
		{"stopped-re-pinned-twice", func(int) bool { return false }, 2},
	} {
		b.Run(c.name, func(b *testing.B) {
			var total uint64
			for range b.N {
				total += heapOf(func() *cachedFleet { return newCachedFleet(b, n, c.running, c.repins) })
			}
			b.ReportMetric(float64(total)/float64(b.N)/n, "B/VM")
		})
	}
}

// BenchmarkCachedVMRead is the cost of reading one VM from a trimmed
// cache (what the planner pays per referencing VM).
func BenchmarkCachedVMRead(b *testing.B) {
	f := newCachedFleet(b, 1, func(int) bool { return false }, 0)
	obj, _, _ := f.vms.GetByKey("team-1/web-0")
	b.ReportAllocs()
	for b.Loop() {
		if asVM(obj) == nil {
			b.Fatal("no VM")
		}
	}
}
