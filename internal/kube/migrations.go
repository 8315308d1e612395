package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
)

// MigrationUIDIndex is the migration informer's index by object UID: a
// VMI's migration state names its migration by UID alone.
const MigrationUIDIndex = "uid"

// WatchMigrations adds an informer of the VirtualMachineInstanceMigrations
// of the cache's namespace, indexed by UID and started with the others by
// Start (call it before). The migration budget reads it to tell when
// KubeVirt counts a migration ended: its object final, a moment after the
// VMI shows the end. It asks the API server first. Where it may not list
// them (forbidden) or they are not served (no such resource), it adds no
// informer and returns why: the budget then goes by the VMI alone.
func (c *Cache) WatchMigrations(ctx context.Context) error {
	vmims := c.Clients.Virt.KubevirtV1().VirtualMachineInstanceMigrations(c.namespace)
	if _, err := vmims.List(ctx, metav1.ListOptions{Limit: 1}); apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: VirtualMachineInstanceMigrations cannot be watched: %w", err)
	}
	inf := informerFor(c.factory, &virtv1.VirtualMachineInstanceMigration{}, vmims.List, vmims.Watch)
	if err := inf.AddIndexers(cache.Indexers{MigrationUIDIndex: indexUID}); err != nil {
		return fmt.Errorf("kube: migration index: %w", err)
	}
	c.migrations = inf
	return nil
}

func indexUID(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	return []string{string(m.GetUID())}, nil
}

// MigrationInformer is the informer WatchMigrations added; nil without.
func (c *Cache) MigrationInformer() cache.SharedIndexInformer { return c.migrations }

// Migration is the VirtualMachineInstanceMigration of namespace with uid
// as the cache holds it: nil when it holds none (deleted, or not watched).
func (c *Cache) Migration(namespace, uid string) *virtv1.VirtualMachineInstanceMigration {
	if c.migrations == nil || uid == "" {
		return nil
	}
	objs, err := c.migrations.GetIndexer().ByIndex(MigrationUIDIndex, uid)
	if err != nil {
		return nil
	}
	for _, o := range objs {
		if m, ok := o.(*virtv1.VirtualMachineInstanceMigration); ok && m.Namespace == namespace {
			return m
		}
	}
	return nil
}
