package kube

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"kubevirt.io/client-go/kubevirt"
)

// Clients are the two clientsets kvlive uses: core Kubernetes for
// ControllerRevisions, KubeVirt's generated clientset for everything else.
// Both have fakes, so the same code runs in unit tests, the demo and a cluster.
type Clients struct {
	Kube kubernetes.Interface
	Virt kubevirt.Interface
	// Host is the API server's URL and Timeout the per-request timeout
	// (--request-timeout), for messages and preflight; empty on fakes.
	Host    string
	Timeout time.Duration
}

// NewClients builds both clientsets from one REST config.
func NewClients(cfg *rest.Config) (Clients, error) {
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	vc, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubevirt client: %w", err)
	}
	return Clients{Kube: kc, Virt: vc, Host: cfg.Host, Timeout: cfg.Timeout}, nil
}
