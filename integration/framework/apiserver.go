package framework

import (
	"fmt"
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
// list), and every write of a VirtualMachineInstanceMigration (when
// KubeVirt created it, and made it final). Request level keeps the patch
// itself (the request body; no response bodies), so a test can tell what a
// write tested and replaced. Nothing else is logged, so the log stays small
// on large fleets.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["patch"]
  resources:
  - group: kubevirt.io
    resources: ["virtualmachines", "virtualmachines/status"]
- level: Request
  verbs: ["create", "update", "patch"]
  resources:
  - group: kubevirt.io
    resources: ["virtualmachineinstancemigrations", "virtualmachineinstancemigrations/status"]
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
// stop when the test ends. The pair may have been started ahead, while an
// earlier test ran (see takeServer); it is the test's alone.
func StartAPIServer(t testing.TB) (*rest.Config, string) {
	t.Helper()
	s := takeServer(t, serverKind{crds: filepath.Join(RepoRoot(t), crdDir)})
	return s.cfg, s.kubeconfig(t)
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
	s := takeServer(t, serverKind{crds: crds, audit: true})
	return s.cfg, s.kubeconfig(t), s.auditLog
}

// serverKind is what a test asks of its API server: the CRDs installed (a
// directory or a YAML stream) and whether the audit log is on.
type serverKind struct {
	crds  string
	audit bool
}

// server is one kube-apiserver + etcd pair, started by startServer in the
// background.
type server struct {
	kind  serverKind
	ready chan struct{} // closed when the start ended; err tells how
	err   error
	took  time.Duration

	env             *envtest.Environment
	cfg             *rest.Config
	apiLog, etcdLog testenv.LogBuffer
	// dir holds the audit policy and log; removed once the servers stop.
	dir      string
	auditLog string
}

// spares holds, for each kind a test asked for, one pair started for the
// next test of that kind, and counts the stops still running. Starting a
// pair takes 4 to 10 seconds, most of it waiting (the API server's start
// hooks, the CRDs becoming established), and stopping one another second
// or two; a test of an area would otherwise spend them before and after it
// ran, 66 times in a run. Every test still gets servers of its own, fresh,
// so what it counts in their audit log is its own.
var spares struct {
	sync.Mutex
	next     map[serverKind]*server
	stopping sync.WaitGroup
	closed   bool
}

// takeServer returns a pair of kind for t, started ahead when one is
// waiting, and starts the next one for the test after. The pair stops when
// t ends, in the background (Shutdown waits for it).
func takeServer(t testing.TB, kind serverKind) *server {
	t.Helper()
	paths := binaries(t, "kube-apiserver", "etcd")
	waited := time.Now()
	spares.Lock()
	if spares.closed {
		spares.Unlock()
		t.Fatal("framework: API servers asked for after Shutdown")
	}
	s := spares.next[kind]
	delete(spares.next, kind)
	spares.Unlock()
	if s == nil {
		s = startServer(kind, paths)
	}
	<-s.ready
	if s.err != nil {
		showTail(t, "kube-apiserver", &s.apiLog)
		showTail(t, "etcd", &s.etcdLog)
		stopServer(s)
		t.Fatalf("framework: start kube-apiserver and etcd: %v", s.err)
	}
	// The next test's pair starts now that this one is up, so the two
	// starts never compete for the cores.
	spares.Lock()
	if !spares.closed && spares.next[kind] == nil {
		if spares.next == nil {
			spares.next = map[serverKind]*server{}
		}
		spares.next[kind] = startServer(kind, paths)
	}
	spares.Unlock()
	// What a test's own servers cost it, for docs/testing.md's sums (grep
	// the areas' events for this line).
	t.Logf("framework: kube-apiserver and etcd served the CRDs %s after their start; this test waited %s for them",
		s.took.Round(time.Millisecond), time.Since(waited).Round(time.Millisecond))
	t.Cleanup(func() {
		showTailIfFailed(t, "kube-apiserver", &s.apiLog)
		stopServer(s)
	})
	return s
}

// startServer starts a pair of kind in the background; the returned
// server's ready is closed when the start ended.
func startServer(kind serverKind, paths []string) *server {
	s := &server{kind: kind, ready: make(chan struct{})}
	go func() {
		defer close(s.ready)
		started := time.Now()
		s.err = s.start(paths)
		s.took = time.Since(started)
	}()
	return s
}

func (s *server) start(paths []string) error {
	silenceOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	s.env = &envtest.Environment{
		BinaryAssetsDirectory: filepath.Dir(paths[0]),
		CRDDirectoryPaths:     []string{s.kind.crds},
		ErrorIfCRDPathMissing: true,
		// The first start on a cold machine (page cache empty, 2 cores)
		// takes well over envtest's default 20 seconds.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// Explicit paths, so a KUBEBUILDER_ASSETS set in the environment for
	// another project cannot swap in binaries of a different version.
	api := s.env.ControlPlane.GetAPIServer()
	api.Path = paths[0]
	api.Out, api.Err = &s.apiLog, &s.apiLog
	if s.kind.audit {
		dir, err := os.MkdirTemp("", "kvlive-audit-")
		if err != nil {
			return err
		}
		s.dir = dir
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return fmt.Errorf("write audit policy: %w", err)
		}
		s.auditLog = filepath.Join(dir, "audit.log")
		api.Configure().
			Set("audit-policy-file", policy).
			Set("audit-log-path", s.auditLog).
			// Write each event as the request completes, never batched, so
			// the log is complete once the writes it records have returned.
			Set("audit-log-mode", "blocking")
	}
	s.env.ControlPlane.Etcd = &envtest.Etcd{Path: paths[1], Out: &s.etcdLog, Err: &s.etcdLog}
	cfg, err := s.env.Start()
	s.cfg = cfg
	return err
}

// kubeconfig writes the admin kubeconfig into t.TempDir() and returns its
// path.
func (s *server) kubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, s.env.KubeConfig, 0o600); err != nil {
		t.Fatalf("framework: write kubeconfig: %v", err)
	}
	return path
}

// stopServer stops the pair in the background. Nothing of a test waits for
// it; Shutdown does. A stop that fails is printed, since no test is left to
// fail.
func stopServer(s *server) {
	spares.stopping.Add(1)
	go func() {
		defer spares.stopping.Done()
		<-s.ready
		// Start can fail after the processes are up (CRD install): Stop
		// ends whatever it started.
		if err := s.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "framework: stop kube-apiserver and etcd: %v\n", err)
		}
		if s.dir != "" {
			_ = os.RemoveAll(s.dir)
		}
	}()
}

// Shutdown stops the pairs started ahead for tests that never came and
// waits until every pair has stopped. A TestMain of a package that starts
// API servers calls it after m.Run, or their processes outlive the tests.
func Shutdown() {
	spares.Lock()
	spares.closed = true
	for kind, s := range spares.next {
		delete(spares.next, kind)
		stopServer(s)
	}
	spares.Unlock()
	spares.stopping.Wait()
}
