//go:build integration

package framework_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	"kubevirt.io/client-go/kubevirt"

	"kvlive/integration/framework"
)

func TestAPIServerServesKubeVirtCRDs(t *testing.T) {
	cfg, kubeconfig := framework.StartAPIServer(t)
	ctx := t.Context()
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	it := &instancetypev1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "u1.small"},
		Spec: instancetypev1beta1.VirtualMachineInstancetypeSpec{
			CPU:    instancetypev1beta1.CPUInstancetype{Guest: 2},
			Memory: instancetypev1beta1.MemoryInstancetype{Guest: resource.MustParse("2Gi")},
		},
	}
	it, err = kv.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Create(ctx, it, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create instance type: %v", err)
	}
	if it.Generation != 1 || it.Spec.CPU.Guest != 2 {
		t.Errorf("instance type: generation %d, guest %d; want 1, 2", it.Generation, it.Spec.CPU.Guest)
	}

	vm := newVM("default", "vm1", it.Name)
	vm, err = kv.KubevirtV1().VirtualMachines("default").Create(ctx, vm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VM: %v", err)
	}
	if vm.Spec.Instancetype == nil || vm.Spec.Instancetype.Name != "u1.small" {
		t.Errorf("VM spec.instancetype pruned or changed: %+v", vm.Spec.Instancetype)
	}
	if vm.Spec.Template.ObjectMeta.Labels["kubevirt.io/vm"] != "vm1" {
		t.Errorf("VM template labels pruned: %v", vm.Spec.Template.ObjectMeta.Labels)
	}

	// The pin lives in status, behind the status subresource, as on KubeVirt.
	vm.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{
		Name:                  it.Name,
		Kind:                  "VirtualMachineClusterInstancetype",
		ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: "vm1-u1.small-v1beta1-uid-1"},
	}
	vm, err = kv.KubevirtV1().VirtualMachines("default").UpdateStatus(ctx, vm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update VM status: %v", err)
	}
	if ref := vm.Status.InstancetypeRef; ref == nil || ref.ControllerRevisionRef == nil ||
		ref.ControllerRevisionRef.Name != "vm1-u1.small-v1beta1-uid-1" {
		t.Errorf("VM status pin not stored: %+v", ref)
	}
	if vm.Generation != 1 {
		t.Errorf("a status write moved the VM generation to %d", vm.Generation)
	}

	t.Run("instance type generation moves on spec changes only", func(t *testing.T) {
		generationFollowsSpec(t, kv, it.Name)
	})
	t.Run("VMI status is written with the object", func(t *testing.T) {
		vmiStatusWithObject(t, kv)
	})
	t.Run("malformed objects are rejected", func(t *testing.T) {
		rejectsMalformed(t, dynamic.NewForConfigOrDie(cfg))
	})
	t.Run("kubeconfig works from another client", func(t *testing.T) {
		kubeconfigWorks(t, kubeconfig)
	})
}

// generationFollowsSpec checks what the watcher relies on: a metadata-only
// update leaves metadata.generation alone, a spec update moves it.
func generationFollowsSpec(t *testing.T, kv kubevirt.Interface, name string) {
	client := kv.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	it, err := client.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := it.Generation
	it.Labels = map[string]string{"touched": "true"}
	if it, err = client.Update(t.Context(), it, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if it.Generation != before {
		t.Errorf("label update moved generation %d -> %d", before, it.Generation)
	}
	it.Spec.CPU.Guest = 4
	if it, err = client.Update(t.Context(), it, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if it.Generation != before+1 {
		t.Errorf("spec update: generation %d, want %d", it.Generation, before+1)
	}
}

// vmiStatusWithObject checks that VMIs, like on KubeVirt, have no status
// subresource: virt-handler (and kvlive's stand-in) write status with Update.
func vmiStatusWithObject(t *testing.T, kv kubevirt.Interface) {
	client := kv.KubevirtV1().VirtualMachineInstances("default")
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vmi1"},
		Spec:       virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Devices: virtv1.Devices{}}},
	}
	vmi, err := client.Create(t.Context(), vmi, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VMI: %v", err)
	}
	vmi.Status.Phase = virtv1.Running
	vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: 2, Cores: 1, Threads: 1}
	if vmi, err = client.Update(t.Context(), vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update VMI: %v", err)
	}
	if vmi.Status.Phase != virtv1.Running || vmi.Status.CurrentCPUTopology == nil {
		t.Errorf("VMI status dropped on update: %+v", vmi.Status)
	}
}

func newVM(namespace, name, instancetype string) *virtv1.VirtualMachine {
	halted := virtv1.RunStrategyHalted
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: &halted,
			Instancetype: &virtv1.InstancetypeMatcher{
				Name: instancetype,
				Kind: "VirtualMachineClusterInstancetype",
			},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/vm": name}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{Devices: virtv1.Devices{}},
				},
			},
		},
	}
}

func rejectsMalformed(t *testing.T, dyn dynamic.Interface) {
	gvr := schema.GroupVersionResource{
		Group: "instancetype.kubevirt.io", Version: "v1beta1", Resource: "virtualmachineclusterinstancetypes",
	}
	cases := []struct {
		name string
		spec map[string]any
	}{
		{"cpu.guest is a string", map[string]any{
			"cpu": map[string]any{"guest": "two"}, "memory": map[string]any{"guest": "1Gi"},
		}},
		{"memory.guest is not a quantity", map[string]any{
			"cpu": map[string]any{"guest": int64(1)}, "memory": map[string]any{"guest": "lots"},
		}},
		{"cpu.guest is missing", map[string]any{
			"cpu": map[string]any{}, "memory": map[string]any{"guest": "1Gi"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "instancetype.kubevirt.io/v1beta1",
				"kind":       "VirtualMachineClusterInstancetype",
				"metadata":   map[string]any{"name": "malformed"},
				"spec":       c.spec,
			}}
			_, err := dyn.Resource(gvr).Create(t.Context(), obj, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error from the API server, got %v", err)
			}
			t.Log(err)
		})
	}
}

func kubeconfigWorks(t *testing.T, path string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("get namespace through the kubeconfig file: %v", err)
	}
}

func TestNATSKeepsStreamsAcrossRestart(t *testing.T) {
	s := framework.StartNATS(t)
	js := connect(t, s.URL)
	ctx := t.Context()

	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "TESTENV", Subjects: []string{"testenv.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "testenv.a", []byte("before restart")); err != nil {
		t.Fatalf("publish: %v", err)
	}

	s.Restart()

	info := streamInfoEventually(t, js, stream.CachedInfo().Config.Name)
	if info.State.Msgs != 1 {
		t.Errorf("after restart: %d messages, want 1", info.State.Msgs)
	}
}

func TestNATSClusterReplicatesStreams(t *testing.T) {
	c := framework.StartNATSCluster(t, 3)
	js := connect(t, c.URL)
	ctx := t.Context()

	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "TESTENV", Subjects: []string{"testenv.>"}, Storage: jetstream.FileStorage, Replicas: 3,
	})
	if err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	info := streamInfoEventually(t, js, "TESTENV")
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("want a leader and 2 replicas, got %+v", info.Cluster)
	}

	// One node down keeps a quorum of two.
	c.Nodes[0].Stop()
	pubCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		if _, err = js.Publish(pubCtx, "testenv.a", []byte("with a node down")); err == nil {
			break
		}
		if pubCtx.Err() != nil {
			t.Fatalf("publish with one node down: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.Nodes[0].Start()
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// streamInfoEventually asks for a stream's info until the servers answer,
// which takes a moment after a restart or a leader election.
func streamInfoEventually(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		s, err := js.Stream(ctx, name)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ctx); err == nil {
				return info
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s info: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestEachTestHasFreshServers takes two API servers one after the other,
// as two tests of an area do, the second started ahead while the first
// was in use: what the first test wrote is not in the second's, and the
// first's audit log is not the second's.
func TestEachTestHasFreshServers(t *testing.T) {
	var firstAudit string
	t.Run("first", func(t *testing.T) {
		cfg, _, audit := framework.StartAPIServerWithAudit(t)
		firstAudit = audit
		cs := kubernetes.NewForConfigOrDie(cfg)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "written-by-the-first"}}
		if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("second", func(t *testing.T) {
		cfg, _, audit := framework.StartAPIServerWithAudit(t)
		if audit == firstAudit {
			t.Errorf("both tests were given the audit log %s", audit)
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		_, err := cs.CoreV1().Namespaces().Get(t.Context(), "written-by-the-first", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the second test's API server has the first's namespace (err %v): servers are shared", err)
		}
	})
}
