package kube_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	virtfake "kubevirt.io/client-go/kubevirt/fake"

	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// TestTheCacheHoldsMigrationsByUID: WatchMigrations adds an informer of
// the VirtualMachineInstanceMigrations, started with the cache, whose
// objects Migration finds by namespace and UID (a VMI names its migration
// by UID alone); where the API server forbids listing them it adds none and
// says why.
func TestTheCacheHoldsMigrationsByUID(t *testing.T) {
	vmim := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kubevirt-workload-update-x", UID: "m-1"},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "a"}, Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationRunning}}
	clients := testenv.FakeClients(nil, vmim)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c, err := kube.NewCache(clients, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WatchMigrations(ctx); err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	defer func() { cancel(); c.Shutdown() }()
	if err := c.WaitForSync(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if c.MigrationInformer() == nil {
		t.Fatal("no migration informer after WatchMigrations")
	}
	if got := c.Migration("ns", "m-1"); got == nil || got.Name != vmim.Name {
		t.Errorf("Migration(ns, m-1) = %v; want %s", got, vmim.Name)
	}
	if got := c.Migration("other", "m-1"); got != nil {
		t.Errorf("Migration(other, m-1) = %s; want none: another namespace", got.Name)
	}

	forbidden := testenv.FakeClients(nil)
	forbidden.Virt.(*virtfake.Clientset).PrependReactor("list", "virtualmachineinstancemigrations", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachineinstancemigrations"}, "", nil)
	})
	c2, err := kube.NewCache(forbidden, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.WatchMigrations(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("WatchMigrations where listing is forbidden: %v; want the forbidden error", err)
	}
	if c2.MigrationInformer() != nil || c2.Migration("ns", "m-1") != nil {
		t.Error("a migration informer where listing is forbidden")
	}
}
