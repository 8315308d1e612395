package kube

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"

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

// Flags are kubectl's connection flags (cli-runtime's ConfigFlags, as
// kubectl plugins bind them: --kubeconfig, --context, -n, --request-timeout,
// --server, --token, --as…) plus the client rate limits, bound once for
// every command that talks to a cluster.
type Flags struct {
	*genericclioptions.ConfigFlags
	// QPS and Burst override the client's rate limits when positive.
	QPS   float32
	Burst int
}

// NewFlags returns unbound flags with kubectl's defaults.
func NewFlags() *Flags {
	return &Flags{ConfigFlags: genericclioptions.NewConfigFlags(true)}
}

// AddFlags binds the connection flags to fs; namespaceUsage replaces
// kubectl's wording for -n, since what a namespace limits differs by command.
func (f *Flags) AddFlags(fs *pflag.FlagSet, namespaceUsage string) {
	f.ConfigFlags.AddFlags(fs)
	if n := fs.Lookup("namespace"); n != nil && namespaceUsage != "" {
		n.Usage = namespaceUsage
	}
}

// ExplicitNamespace is the -n value as given, "" when not given.
func (f *Flags) ExplicitNamespace() string {
	if f.Namespace == nil {
		return ""
	}
	return *f.Namespace
}

// Load resolves the kubeconfig the way kubectl does (flags, $KUBECONFIG,
// ~/.kube/config, in-cluster) and returns the REST config and the
// namespace the user means by default.
func (f *Flags) Load() (*rest.Config, string, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := f.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
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
	return Clients{Kube: kc, Virt: vc, Host: cfg.Host, Timeout: cfg.Timeout}, nil
}

// ContextNamespace is the namespace of the kubeconfig context (or the
// pod's, in a cluster), ignoring -n: where kvlive keeps what it owns, like
// its Lease, whatever -n scopes.
func (f *Flags) ContextNamespace() (string, error) {
	u := genericclioptions.NewConfigFlags(false)
	u.KubeConfig, u.Context, u.ClusterName, u.AuthInfoName = f.KubeConfig, f.Context, f.ClusterName, f.AuthInfoName
	ns, _, err := u.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	return ns, nil
}
