package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"

	"kvlive/internal/kube"
)

// kubeFlags are kubectl's connection flags (--kubeconfig, --context, -n,
// --request-timeout, --server, --token, --as…), bound with client-go's
// clientcmd under kubectl's names, help and defaults, plus the client rate
// limits, for every command that talks to a cluster.
type kubeFlags struct {
	kubeconfig string
	// cacheDir is kubectl's --cache-dir, its discovery cache, accepted as
	// kubectl accepts it; kvlive reads no discovery.
	cacheDir  string
	overrides clientcmd.ConfigOverrides
	// QPS and Burst override the client's rate limits when positive.
	QPS   float32
	Burst int
	// loader resolves the kubeconfig once, on first use, as kubectl does.
	loader clientcmd.ClientConfig
}

// newKubeFlags returns unbound flags with kubectl's defaults.
func newKubeFlags() *kubeFlags {
	return &kubeFlags{
		cacheDir:  defaultCacheDir(),
		overrides: clientcmd.ConfigOverrides{ClusterDefaults: clientcmd.ClusterDefaults},
	}
}

// defaultCacheDir is kubectl's --cache-dir default.
func defaultCacheDir() string {
	if dir := os.Getenv("KUBECACHEDIR"); dir != "" {
		return dir
	}
	return filepath.Join(homedir.HomeDir(), ".kube", "cache")
}

// overrideFlags are clientcmd's flag names for the overrides with the help
// kubectl gives them (cli-runtime's wording); the flags kubectl does not
// bind (basic auth, --proxy-url) are left out, and -n is bound apart.
func overrideFlags() clientcmd.ConfigOverrideFlags {
	f := clientcmd.RecommendedConfigOverrideFlags("")
	f.AuthOverrideFlags.Username, f.AuthOverrideFlags.Password = clientcmd.FlagInfo{}, clientcmd.FlagInfo{}
	f.AuthOverrideFlags.Impersonate.Description = "Username to impersonate for the operation. User could be a regular user or a service account in a namespace."
	f.AuthOverrideFlags.ImpersonateUID.Description = "UID to impersonate for the operation."
	f.ClusterOverrideFlags.ProxyURL = clientcmd.FlagInfo{}
	f.ClusterOverrideFlags.APIServer.ShortName = "s"
	f.ClusterOverrideFlags.TLSServerName.Description = "Server name to use for server certificate validation. If it is not provided, the hostname used to contact the server is used"
	f.ContextOverrideFlags.Namespace = clientcmd.FlagInfo{}
	return f
}

// addFlags binds the connection flags to fs; namespaceUsage replaces
// kubectl's wording for -n, since what a namespace limits differs by command.
func (f *kubeFlags) addFlags(fs *pflag.FlagSet, namespaceUsage string) {
	if namespaceUsage == "" {
		namespaceUsage = "If present, the namespace scope for this CLI request"
	}
	fs.StringVar(&f.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	fs.StringVar(&f.cacheDir, "cache-dir", f.cacheDir, "Default cache directory")
	// -n as kubectl takes it: the value as given (clientcmd's own binding
	// would strip a "ns/" prefix).
	fs.StringVarP(&f.overrides.Context.Namespace, clientcmd.FlagNamespace, "n", "", namespaceUsage)
	clientcmd.BindOverrideFlags(&f.overrides, fs, overrideFlags())
}

// explicitNamespace is the -n value as given, "" when not given.
func (f *kubeFlags) explicitNamespace() string { return f.overrides.Context.Namespace }

// clientConfig is the kubeconfig the flags name, resolved the way kubectl
// does: --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else (no
// kubeconfig at all, in a pod) the in-cluster config; the flags override it.
func (f *kubeFlags) clientConfig() clientcmd.ClientConfig {
	if f.loader == nil {
		f.loader = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loadingRules(f.kubeconfig), &f.overrides)
	}
	return f.loader
}

// loadingRules are kubectl's: explicit is --kubeconfig, and a kubeconfig
// that says nothing falls back to client-go's defaults.
func loadingRules(explicit string) *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.DefaultClientConfig = &clientcmd.DefaultClientConfig
	rules.ExplicitPath = explicit
	return rules
}

// load resolves the kubeconfig and returns the REST config and the
// namespace the user means by default.
func (f *kubeFlags) load() (*rest.Config, string, error) {
	cfg, err := f.clientConfig().ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := f.clientConfig().Namespace()
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

// contextNamespace is the namespace of the kubeconfig context (or the
// pod's, in a cluster), ignoring -n: where kvlive keeps what it owns, like
// its Lease, whatever -n scopes.
func (f *kubeFlags) contextNamespace() (string, error) {
	o := &clientcmd.ConfigOverrides{ClusterDefaults: f.overrides.ClusterDefaults, CurrentContext: f.overrides.CurrentContext}
	o.Context.Cluster, o.Context.AuthInfo = f.overrides.Context.Cluster, f.overrides.Context.AuthInfo
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loadingRules(f.kubeconfig), o).Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	return ns, nil
}

// clients are the clients of the kubeconfig the flags name.
func (f *kubeFlags) clients() (kube.Clients, error) {
	cfg, _, err := f.load()
	if err != nil {
		return kube.Clients{}, err
	}
	return kube.NewClients(cfg)
}
