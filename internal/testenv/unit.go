package testenv

import (
	"context"
	"fmt"
	"go.uber.org/goleak"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/internal/kube"
	"kvlive/internal/kube/inmemory"
)

// BareJetStream starts an embedded, in-process NATS server with JetStream
// and nothing of kvlive's on it yet (a fresh bus), stopped when the test
// ends.
func BareJetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := bus.ConnectEmbedded(ns, t.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown() })
	js, err := bus.NewJetStream(nc, bus.ReadBound, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// JetStream starts an embedded, in-process NATS server with kvlive's
// streams, consumers and buckets, stopped when the test ends.
func JetStream(t testing.TB, configure ...func(*events.StreamOptions)) jetstream.JetStream {
	t.Helper()
	js := BareJetStream(t)
	o := events.DefaultStreamOptions()
	for _, c := range configure {
		c(&o)
	}
	if err := events.Setup(context.Background(), js, o, nil); err != nil {
		t.Fatal(err)
	}
	return js
}

// FakeClients returns fake clientsets holding objs (KubeVirt kinds to the
// KubeVirt clientset, everything else to the core one).
func FakeClients(kubeObjs []runtime.Object, virtObjs ...runtime.Object) kube.Clients {
	return inmemory.New(kubeObjs, virtObjs...)
}

// RunningVMI is a running, live-migratable VMI booted with 2 sockets (up
// to 8) and 4Gi of memory (up to 16Gi): the shape unit tests and
// benchmarks give VMs whose changes can go live.
func RunningVMI(namespace, name string) *virtv1.VirtualMachineInstance {
	four := resource.MustParse("4Gi")
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64", Domain: virtv1.DomainSpec{
			CPU:    &virtv1.CPU{Sockets: 2, Cores: 1, Threads: 1, MaxSockets: 8},
			Memory: &virtv1.Memory{Guest: &four, MaxGuest: resource.NewQuantity(16<<30, resource.BinarySI)},
		}},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running,
			Conditions: []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}},
			Memory:     &virtv1.MemoryStatus{GuestAtBoot: &four, GuestCurrent: &four, GuestRequested: &four}},
	}
}

// VerifyNoLeaks runs a package's tests and then fails if any goroutine
// they started is still running: informers, consumers, heartbeats and
// observers must all stop with their context. Goroutines told to stop may
// take a moment on a loaded machine under the race detector, so it looks
// again for up to 10s before it reports them. Call it from TestMain.
func VerifyNoLeaks(m *testing.M) {
	code := m.Run()
	if code == 0 {
		opts := []goleak.Option{
			// klog's flush daemon lives for the process, started by client-go.
			goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		}
		err := goleak.Find(opts...)
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); err = goleak.Find(opts...) {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left running after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// MigratedTo leaves vmi as a live migration that ended at end leaves it
// after virt-controller hot-plugged sockets into it: the spec and the
// current topology at sockets, and the VMI's migration state completed on
// another node, which is how a hot-plug reaches the guest in KubeVirt v1.9.
func MigratedTo(vmi *virtv1.VirtualMachineInstance, sockets uint32, end time.Time) {
	vmi.Spec.Domain.CPU.Sockets = sockets
	vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: sockets, Cores: 1, Threads: 1}
	at := metav1.NewTime(end)
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{
		MigrationUID: types.UID("migration-" + vmi.Name), SourceNode: "node01", TargetNode: "node02",
		StartTimestamp: &at, EndTimestamp: &at, Completed: true,
	}
	vmi.Status.NodeName = "node02"
}
