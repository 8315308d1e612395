package kube

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"kubevirt.io/client-go/kubevirt"
)

// Clients are the two clientsets kvlive uses: core Kubernetes for
// ControllerRevisions, KubeVirt's generated clientset for everything else.
// Both have fakes, so the same code runs in unit tests, the demo and a cluster.
type Clients struct {
	Kube kubernetes.Interface
	Virt kubevirt.Interface
}

// ConfigFlags are the standard kubectl connection flags.
type ConfigFlags struct {
	Kubeconfig string
	Context    string
	Namespace  string
	QPS        float32
	Burst      int
}

// Load resolves the kubeconfig the way kubectl does (flag, $KUBECONFIG,
// ~/.kube/config, in-cluster) and returns the REST config and the namespace
// the user means by default.
func (f ConfigFlags) Load() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.Context}
	if f.Namespace != "" {
		overrides.Context.Namespace = f.Namespace
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	if f.QPS > 0 {
		cfg.QPS = f.QPS
	}
	if f.Burst > 0 {
		cfg.Burst = f.Burst
	}
	return cfg, ns, nil
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
	return Clients{Kube: kc, Virt: vc}, nil
}
