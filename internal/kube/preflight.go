package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	instancetypeapi "kubevirt.io/api/instancetype"
)

// PreflightTimeout bounds a one-shot command's first requests when
// --request-timeout is not given.
const PreflightTimeout = 15 * time.Second

// Preflight lists one object of every kind the cache informs on, all at
// once, so a one-shot command fails at once and says why where informers
// would retry until the sync timeout: the API server cannot be reached
// (its URL), a kind is forbidden (the server names the verb, resource and
// user), KubeVirt's CRDs are missing, or the server did not answer in time.
func Preflight(ctx context.Context, c Clients, namespace string) error {
	timeout := PreflightTimeout
	if c.Timeout > 0 {
		timeout = c.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	one := metav1.ListOptions{Limit: 1}
	revisions := metav1.ListOptions{Limit: 1, LabelSelector: instancetypeapi.ControllerRevisionObjectKindLabel}
	it := c.Virt.InstancetypeV1beta1()
	checks := []struct {
		what string
		list func() error
	}{
		{"virtualmachines.kubevirt.io", func() error {
			_, err := c.Virt.KubevirtV1().VirtualMachines(namespace).List(ctx, one)
			return err
		}},
		{"virtualmachineinstances.kubevirt.io", func() error {
			_, err := c.Virt.KubevirtV1().VirtualMachineInstances(namespace).List(ctx, one)
			return err
		}},
		{"kubevirts.kubevirt.io", func() error { _, err := c.Virt.KubevirtV1().KubeVirts("").List(ctx, one); return err }},
		{"controllerrevisions.apps", func() error {
			_, err := c.Kube.AppsV1().ControllerRevisions(namespace).List(ctx, revisions)
			return err
		}},
		{"virtualmachineclusterinstancetypes.instancetype.kubevirt.io", func() error {
			_, err := it.VirtualMachineClusterInstancetypes().List(ctx, one)
			return err
		}},
		{"virtualmachineinstancetypes.instancetype.kubevirt.io", func() error {
			_, err := it.VirtualMachineInstancetypes(namespace).List(ctx, one)
			return err
		}},
		{"virtualmachineclusterpreferences.instancetype.kubevirt.io", func() error {
			_, err := it.VirtualMachineClusterPreferences().List(ctx, one)
			return err
		}},
		{"virtualmachinepreferences.instancetype.kubevirt.io", func() error {
			_, err := it.VirtualMachinePreferences(namespace).List(ctx, one)
			return err
		}},
	}
	// A command then waits for the slowest list, not for the eight in turn
	// (a tenth of a second on a busy API server, before a switch can
	// start). The answers are read in the order above, and the first
	// failure is reported at once, the lists still out cancelled: a
	// refusal is not held back by a list that hangs.
	done := make([]chan error, len(checks))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, check := range checks {
		done[i] = make(chan error, 1)
		wg.Go(func() { done[i] <- check.list() })
	}
	for i := range checks {
		if err := <-done[i]; err != nil {
			cancel()
			return explain(err, c.Host, checks[i].what, namespace, timeout)
		}
	}
	return nil
}

// explain turns a failed list into what the user can act on.
func explain(err error, host, what, namespace string, timeout time.Duration) error {
	where := "in namespace " + namespace
	if namespace == "" {
		where = "in all namespaces"
	}
	var netErr net.Error
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server at %s refuses to list %s %s, which kvlive reads: %w", host, what, where, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the API server at %s does not serve %s: is KubeVirt installed? (%w)", host, what, err)
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || (errors.As(err, &netErr) && netErr.Timeout()):
		return fmt.Errorf("the API server at %s did not answer within %s (--request-timeout) listing %s: %w", host, timeout, what, err)
	case errors.As(err, &netErr):
		return fmt.Errorf("cannot reach the API server at %s: %w", host, err)
	}
	return fmt.Errorf("the API server at %s: list %s %s: %w", host, what, where, err)
}
