package framework

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"kvlive/internal/testenv"
)

// crdDir holds the generated KubeVirt CRDs, relative to the repository root.
var crdDir = filepath.Join("deploy", "crds")

// silenceOnce points controller-runtime's logger, which envtest logs
// through, at a discarding sink. Left unset, controller-runtime prints a
// stack trace warning into the test output after 30 seconds.
var silenceOnce sync.Once

// auditPolicy records every patch of a VirtualMachine and of its status,
// the writes that move a VM's pin or reference (or ask for its restart),
// every delete and every read by name of a ControllerRevision (a one-shot
// plan reads none when its selection brought them), every create and delete of a
// VMI (a restart's stop and start, whoever carries it out), and each list
// and watch of VMs, VMIs and revisions (how an informer took its first
// list). Request level keeps the patch itself (the request
// body; no response bodies), so a test can tell what a write tested and
// replaced. Nothing else is logged, so the log stays small on large fleets.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["patch"]
  resources:
  - group: kubevirt.io
    resources: ["virtualmachines", "virtualmachines/status"]
- level: Metadata
  verbs: ["delete", "get"]
  resources:
  - group: apps
    resources: ["controllerrevisions"]
- level: Metadata
  verbs: ["create", "delete"]
  resources:
  - group: kubevirt.io
    resources: ["virtualmachineinstances"]
- level: Metadata
  verbs: ["list", "watch"]
  resources:
  - group: kubevirt.io
    resources: ["virtualmachines", "virtualmachineinstances"]
  - group: apps
    resources: ["controllerrevisions"]
- level: None
`

// StartAPIServer starts etcd and kube-apiserver from .bin/, installs the
// KubeVirt CRDs from deploy/crds, and waits until they are served. It returns
// an admin client config and the path of a kubeconfig file (in t.TempDir())
// that a separate process, such as the kvlive binary, can use. Both servers
// stop when the test ends.
func StartAPIServer(t testing.TB) (*rest.Config, string) {
	t.Helper()
	return startAPIServer(t, filepath.Join(RepoRoot(t), crdDir), nil)
}

// StartAPIServerWithAudit is StartAPIServer with the API server's audit log
// on: every patch of a VirtualMachine or its status subresource is written,
// at Request level (user agent, object, response code and the patch sent),
// as one JSON event per line to the returned path. Tests count writes per
// VM from it.
func StartAPIServerWithAudit(t testing.TB) (cfg *rest.Config, kubeconfig, auditLog string) {
	t.Helper()
	return startAPIServerWithAudit(t, filepath.Join(RepoRoot(t), crdDir))
}

func startAPIServerWithAudit(t testing.TB, crds string) (cfg *rest.Config, kubeconfig, auditLog string) {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		t.Fatalf("framework: write audit policy: %v", err)
	}
	auditLog = filepath.Join(dir, "audit.log")
	cfg, kubeconfig = startAPIServer(t, crds, func(api *envtest.APIServer) {
		api.Configure().
			Set("audit-policy-file", policy).
			Set("audit-log-path", auditLog).
			// Write each event as the request completes, never batched, so
			// the log is complete once the writes it records have returned.
			Set("audit-log-mode", "blocking")
	})
	return cfg, kubeconfig, auditLog
}

// startAPIServer starts the servers and installs the CRDs at crds (a
// directory or a YAML stream); configure, when set, adjusts the API server's
// flags before it starts.
func startAPIServer(t testing.TB, crds string, configure func(*envtest.APIServer)) (*rest.Config, string) {
	t.Helper()
	silenceOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	root := RepoRoot(t)
	paths := binaries(t, "kube-apiserver", "etcd")
	var apiLog, etcdLog testenv.LogBuffer
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join(root, binDir),
		CRDDirectoryPaths:     []string{crds},
		ErrorIfCRDPathMissing: true,
		// The first start on a cold machine (page cache empty, 2 cores)
		// takes well over envtest's default 20 seconds.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// Explicit paths, so a KUBEBUILDER_ASSETS set in the environment for
	// another project cannot swap in binaries of a different version.
	api := env.ControlPlane.GetAPIServer()
	api.Path = paths[0]
	api.Out, api.Err = &apiLog, &apiLog
	if configure != nil {
		configure(api)
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: paths[1], Out: &etcdLog, Err: &etcdLog}
	started := time.Now()
	cfg, err := env.Start()
	if err != nil {
		showTail(t, "kube-apiserver", &apiLog)
		showTail(t, "etcd", &etcdLog)
		// Start can fail after the processes are up (CRD install).
		_ = env.Stop()
		t.Fatalf("framework: start kube-apiserver and etcd: %v", err)
	}
	// What a test's own servers cost it, for docs/testing.md's sums (grep
	// the areas' events for this line).
	t.Logf("framework: kube-apiserver and etcd served the CRDs %s after their start", time.Since(started).Round(time.Millisecond))
	t.Cleanup(func() {
		showTailIfFailed(t, "kube-apiserver", &apiLog)
		if err := env.Stop(); err != nil {
			t.Errorf("framework: stop kube-apiserver and etcd: %v", err)
		}
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatalf("framework: write kubeconfig: %v", err)
	}
	return cfg, kubeconfig
}
