package testenv

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
)

// crdDir holds the generated KubeVirt CRDs, relative to the repository root.
var crdDir = filepath.Join("deploy", "crds")

// silenceOnce points controller-runtime's logger, which envtest logs
// through, at a discarding sink. Left unset, controller-runtime prints a
// stack trace warning into the test output after 30 seconds.
var silenceOnce sync.Once

// StartAPIServer starts etcd and kube-apiserver from .bin/, installs the
// KubeVirt CRDs from deploy/crds, and waits until they are served. It returns
// an admin client config and the path of a kubeconfig file (in t.TempDir())
// that a separate process, such as the kvlive binary, can use. Both servers
// stop when the test ends.
func StartAPIServer(t testing.TB) (*rest.Config, string) {
	t.Helper()
	silenceOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })

	root := RepoRoot(t)
	paths := binaries(t, "kube-apiserver", "etcd")
	var apiLog, etcdLog logBuffer

	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join(root, binDir),
		CRDDirectoryPaths:     []string{filepath.Join(root, crdDir)},
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
	env.ControlPlane.Etcd = &envtest.Etcd{Path: paths[1], Out: &etcdLog, Err: &etcdLog}

	cfg, err := env.Start()
	if err != nil {
		showTail(t, "kube-apiserver", &apiLog)
		showTail(t, "etcd", &etcdLog)
		// Start can fail after the processes are up (CRD install).
		_ = env.Stop()
		t.Fatalf("testenv: start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		showTailIfFailed(t, "kube-apiserver", &apiLog)
		if err := env.Stop(); err != nil {
			t.Errorf("testenv: stop kube-apiserver and etcd: %v", err)
		}
	})

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatalf("testenv: write kubeconfig: %v", err)
	}
	return cfg, kubeconfig
}
