package inmemory

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	virtv1 "kubevirt.io/api/core/v1"
)

// TestWatchersNeverFill: a watcher nobody reads while 10,000 VMs are
// written (the fake clientsets' own panic at 101) gets every event, in
// the order written, and only those of its namespace; Stop closes it.
func TestWatchersNeverFill(t *testing.T) {
	c := New(nil)
	vms := c.Virt.KubevirtV1().VirtualMachines("ns")
	w, err := vms.Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Virt.KubevirtV1().VirtualMachines("").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()
	const n = 10_000
	for i := range n {
		vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("vm-%d", i)}}
		if _, err := vms.Create(t.Context(), vm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	other := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "vm-0"}}
	if _, err := c.Virt.KubevirtV1().VirtualMachines("other").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := vms.Delete(t.Context(), "vm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ev := next(t, w)
		if name := ev.Object.(*virtv1.VirtualMachine).Name; ev.Type != watch.Added || name != fmt.Sprintf("vm-%d", i) {
			t.Fatalf("event %d: %s %s, want ADDED vm-%d", i, ev.Type, name, i)
		}
	}
	if ev := next(t, w); ev.Type != watch.Deleted || ev.Object.(*virtv1.VirtualMachine).Namespace != "ns" {
		t.Fatalf("after the creates: %s of %v, want ns/vm-0 DELETED (and no event of namespace other)", ev.Type, ev.Object)
	}
	w.Stop()
	select {
	case ev, open := <-w.ResultChan():
		if open {
			t.Fatalf("after Stop: %s", ev.Type)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the result channel is still open 10s after Stop")
	}
	for range n {
		next(t, all)
	}
	if ev := next(t, all); ev.Object.(*virtv1.VirtualMachine).Namespace != "other" {
		t.Fatalf("an all-namespaces watcher missed namespace other: %v", ev.Object)
	}
}

// TestUpdatesAreModified: a status patch is a MODIFIED event carrying the
// stored object.
func TestUpdatesAreModified(t *testing.T) {
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm"}}
	c := New(nil, vm)
	vms := c.Virt.KubevirtV1().VirtualMachines("ns")
	w, err := vms.Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := vms.Patch(t.Context(), "vm", "application/merge-patch+json", []byte(`{"status":{"ready":true}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != watch.Modified || !ev.Object.(*virtv1.VirtualMachine).Status.Ready {
		t.Fatalf("%s %+v, want MODIFIED and ready", ev.Type, ev.Object)
	}
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return watch.Event{}
}
