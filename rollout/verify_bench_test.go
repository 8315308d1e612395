package rollout

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// unmovedFleet shows every VM asked for still on its old pin, so each
// moved VM's verdict stays awaited; its informers never run.
type unmovedFleet struct{ vms, vmis cache.SharedIndexInformer }

func (unmovedFleet) VM(namespace, name string) *virtv1.VirtualMachine {
	vm := verifyVM(name)
	vm.Status.InstancetypeRef.ControllerRevisionRef.Name = name + "-old"
	vm.UID = types.UID("uid-" + name)
	return vm
}
func (unmovedFleet) VMI(string, string) *virtv1.VirtualMachineInstance { return nil }
func (f unmovedFleet) VMInformer() cache.SharedIndexInformer           { return f.vms }
func (f unmovedFleet) VMIInformer() cache.SharedIndexInformer          { return f.vmis }

// BenchmarkAwaitedVerdicts measures the memory the verifier holds per moved
// VM awaiting its verdict (the outcome it keeps unacked, its queue entry),
// at 10,000 and 100,000 VMs awaited at once: heap in use once every VM is
// awaited, less the heap before the verifier started, per VM.
func BenchmarkAwaitedVerdicts(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(awaitedBytesPerVM(b, n), "bytes/VM")
			}
		})
	}
}

func awaitedBytesPerVM(b *testing.B, n int) float64 {
	b.StopTimer()
	js := testenv.JetStream(b)
	ctx := b.Context()
	for i := range n {
		name := fmt.Sprintf("vm-%06d", i)
		out := events.Outcome{EventID: verifyEvent, VM: events.VMRef{Namespace: "ns", Name: name, UID: "uid-" + name}, Result: events.ResultLive,
			Revision: name + "-new", Wrote: true, Attempt: 1, FinishedAt: time.Now().UTC(), VerdictDeadline: time.Hour,
			Changes: []events.Change{{Field: "cpu.sockets", From: "2", To: "4", Class: "live"}, {Field: "memory.guest", From: "4Gi", To: "6Gi", Class: "live"}}}
		id := events.OutcomeID(verifyEvent, out.VM.UID, 1)
		body, err := events.Encode(events.TypeOutcome, id, "kvlive/applier", out.VM.String(), out.FinishedAt, &out)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishMsgAsync(events.NewMsg(events.OutcomeSubject("ns", verifyEvent), id, events.TypeOutcome, body)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("outcomes not stored within 5 minutes")
	}
	informer := func(obj k8sruntime.Object) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(&cache.ListWatch{}, obj, 0, cache.Indexers{})
	}
	fleet := unmovedFleet{vms: informer(&virtv1.VirtualMachine{}), vmis: informer(&virtv1.VirtualMachineInstance{})}
	before := heapInUse()
	b.StartTimer()
	v, err := NewVerifier(VerifierConfig{Fleet: fleet, JetStream: js, Deadline: time.Hour, Workers: 2})
	if err != nil {
		b.Fatal(err)
	}
	vctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- v.Run(vctx) }()
	testenv.Eventually(b, 5*time.Minute, fmt.Sprintf("%d VMs awaited", n), func() bool { return v.Awaited() == n })
	b.StopTimer()
	perVM := float64(heapInUse()-before) / float64(n)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return perVM
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
