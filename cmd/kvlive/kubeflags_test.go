package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://c1.example:6443"}
- name: c2
  cluster: {server: "https://c2.example:6443"}
users:
- name: u1
  user: {token: abc}
contexts:
- name: ctx1
  context: {cluster: c1, user: u1, namespace: team-a}
- name: ctx2
  context: {cluster: c2, user: u1}
current-context: ctx1
`

// parseKubeFlags binds kubeFlags to a fresh flag set and parses args.
func parseKubeFlags(t *testing.T, args ...string) (*kubeFlags, *pflag.FlagSet) {
	t.Helper()
	k := newKubeFlags()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	k.addFlags(fs, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return k, fs
}

// TestKubeFlagsAreKubectls: the connection flags have kubectl's names and
// shorthands, and no flag kubectl does not have.
func TestKubeFlagsAreKubectls(t *testing.T) {
	_, fs := parseKubeFlags(t)
	var got []string
	fs.VisitAll(func(f *pflag.Flag) {
		name := f.Name
		if f.Shorthand != "" {
			name += "/" + f.Shorthand
		}
		got = append(got, name)
	})
	slices.Sort(got)
	want := []string{"as", "as-group", "as-uid", "cache-dir", "certificate-authority", "client-certificate", "client-key", "cluster", "context",
		"disable-compression", "insecure-skip-tls-verify", "kubeconfig", "namespace/n", "request-timeout", "server/s", "tls-server-name", "token", "user"}
	if !slices.Equal(got, want) {
		t.Errorf("flags %v\nwant  %v", got, want)
	}
}

// TestKubeFlagsLoad: the kubeconfig's current context unless --context;
// -n over the context's namespace, but not for the context's namespace
// itself; --request-timeout in kubectl's format; the rate limits.
func TestKubeFlagsLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args            []string
		host, ns, ctxNS string
		timeout         time.Duration
	}{
		{nil, "https://c1.example:6443", "team-a", "team-a", 0},
		{[]string{"--context", "ctx2"}, "https://c2.example:6443", "default", "default", 0},
		{[]string{"-n", "shop", "--request-timeout", "5"}, "https://c1.example:6443", "shop", "team-a", 5 * time.Second},
		{[]string{"--cluster", "c2", "-s", "https://other:6443", "--request-timeout", "2m"}, "https://other:6443", "team-a", "team-a", 2 * time.Minute},
	} {
		k, _ := parseKubeFlags(t, append([]string{"--kubeconfig", path}, tt.args...)...)
		k.QPS, k.Burst = 7, 9
		cfg, ns, err := k.load()
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		ctxNS, err := k.contextNamespace()
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if cfg.Host != tt.host || ns != tt.ns || ctxNS != tt.ctxNS || cfg.Timeout != tt.timeout || cfg.QPS != 7 || cfg.Burst != 9 || cfg.BearerToken != "abc" {
			t.Errorf("%v: host %s, namespace %s (context's %s), timeout %s, qps %g, burst %d, token %q; want %s, %s (%s), %s, 7, 9, abc",
				tt.args, cfg.Host, ns, ctxNS, cfg.Timeout, cfg.QPS, cfg.Burst, cfg.BearerToken, tt.host, tt.ns, tt.ctxNS, tt.timeout)
		}
	}
	k, _ := parseKubeFlags(t, "--kubeconfig", path, "-n", "shop")
	if k.explicitNamespace() != "shop" {
		t.Errorf("explicit namespace %q, want shop", k.explicitNamespace())
	}
	k, _ = parseKubeFlags(t, "--kubeconfig", path, "--context", "nosuch")
	if _, _, err := k.load(); err == nil {
		t.Error("a context the kubeconfig lacks was loaded")
	}
}
