package framework

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// KubeVirt's real controller, as hack/tools.sh virt-controller leaves it in
// .bin/: the binary, the CRDs virt-operator installs, and, when it could not
// be built, the reason.
const (
	virtControllerBin = "virt-controller"
	kubevirtCRDs      = "kubevirt-crds.yaml"
	virtControllerWhy = "virt-controller.skipped"
)

// KubeVirtNamespace is where virt-controller runs and the KubeVirt CR lives.
const KubeVirtNamespace = "kubevirt"

// NodeName is the first of the Nodes the players schedule VMIs onto.
const NodeName = "node01"

// EnvRealKubeVirtLog names a file each test that ran against the real
// virt-controller appends its name to; hack/test.sh reads it for its summary.
const EnvRealKubeVirtLog = "KVLIVE_REAL_KUBEVIRT_LOG"

// KubeVirt is KubeVirt v1.9.0's own virt-controller running against a real
// kube-apiserver + etcd that carry KubeVirt's generated CRDs, with the
// players of what is absent (scheduler, kubelet, virt-handler). Everything
// stops when the test ends.
type KubeVirt struct {
	Config     *rest.Config
	Kubeconfig string
	AuditLog   string
	Clients    kube.Clients
	// Handler plays virt-handler: it reports VMIs running and runs both
	// ends of every migration, where hotplugs finish, unless held.
	Handler *VirtHandler
}

// StartKubeVirt starts kube-apiserver + etcd with KubeVirt's CRDs, a Node, a
// KubeVirt CR with vmRolloutStrategy LiveUpdate and workloadUpdateMethods
// [LiveMigrate], virt-controller, and the
// players, and waits until virt-controller leads. When virt-controller was
// not built the test is skipped with one line saying why.
func StartKubeVirt(t *testing.T) *KubeVirt {
	t.Helper()
	controller, crds := RequireKubeVirt(t)
	cfg, kubeconfig, auditLog := startAPIServerWithAudit(t, crds)
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	clients, err := kube.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kv := &KubeVirt{Config: cfg, Kubeconfig: kubeconfig, AuditLog: auditLog, Clients: clients}
	ctx := t.Context()
	if err := createKubeVirtWorld(ctx, clients); err != nil {
		t.Fatalf("framework: KubeVirt's namespace, CR and node: %v", err)
	}
	startVirtController(t, controller, kubeconfig)
	kv.Handler = startPlayers(t, clients)
	if path := os.Getenv(EnvRealKubeVirtLog); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, _ = fmt.Fprintln(f, t.Name())
			_ = f.Close()
		}
	}
	return kv
}

// RequireKubeVirt returns the paths of the virt-controller binary and of
// KubeVirt's CRDs, or skips the test with one loud line saying why they are
// not there. Under CI=true, where the real-KubeVirt tests must run, their
// absence fails the test instead.
func RequireKubeVirt(t testing.TB) (controller, crds string) {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), binDir)
	controller, crds = filepath.Join(dir, virtControllerBin), filepath.Join(dir, kubevirtCRDs)
	_, errBin := os.Stat(controller)
	_, errCRDs := os.Stat(crds)
	if errBin == nil && errCRDs == nil {
		return controller, crds
	}
	why := "run hack/tools.sh virt-controller (with KUBEVIRT_SOURCE or KUBEVIRT_SOURCE_TARBALL naming KubeVirt v1.9.0's source where the module proxy lacks its modules)"
	if b, err := os.ReadFile(filepath.Join(dir, virtControllerWhy)); err == nil {
		why = strings.TrimSpace(string(b))
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("REAL KUBEVIRT NOT RUN under CI=true: KubeVirt's virt-controller was not built: %s", why)
	}
	t.Skipf("REAL KUBEVIRT NOT RUN: KubeVirt's virt-controller was not built: %s", why)
	return "", ""
}

// createKubeVirtWorld creates what virt-controller needs before it starts:
// its namespace, the KubeVirt CR (LiveUpdate, with the status phase without
// which the controller ignores the CR) and the Nodes VMIs run on.
func createKubeVirtWorld(ctx context.Context, c kube.Clients) error {
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KubeVirtNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cr := &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: KubeVirtNamespace, Name: "kubevirt"},
		Spec: virtv1.KubeVirtSpec{
			Configuration: virtv1.KubeVirtConfiguration{VMRolloutStrategy: ptr(virtv1.VMRolloutStrategyLiveUpdate)},
			// What brings hot-plugged CPU and memory into a running guest:
			// the workload updater migrates the VMI, and the players run
			// the migration (migration.go).
			WorkloadUpdateStrategy: virtv1.KubeVirtWorkloadUpdateStrategy{
				WorkloadUpdateMethods: []virtv1.WorkloadUpdateMethod{virtv1.WorkloadUpdateMethodLiveMigrate},
			},
		},
	}
	cr, err := c.Virt.KubevirtV1().KubeVirts(KubeVirtNamespace).Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	cr.Status.Phase = virtv1.KubeVirtPhaseDeployed
	if _, err := c.Virt.KubevirtV1().KubeVirts(KubeVirtNamespace).UpdateStatus(ctx, cr, metav1.UpdateOptions{}); err != nil {
		return err
	}
	for _, name := range Nodes {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				virtv1.NodeSchedulable: "true",
				corev1.LabelHostname:   name,
			}},
		}
		if _, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// virtControllerStartTimeout bounds waiting for virt-controller to sync its
// caches and take its Lease.
const virtControllerStartTimeout = 2 * time.Minute

// startVirtController runs the binary on loopback with a self-signed cert for
// its health port and waits until it answers /leader.
func startVirtController(t *testing.T, bin, kubeconfig string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := writeServingCert(certFile, keyFile); err != nil {
		t.Fatalf("framework: virt-controller serving cert: %v", err)
	}
	port := freeLoopbackPort(t)
	var log testenv.LogBuffer
	cmd := exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--prom-cert-file", certFile, "--prom-key-file", keyFile,
		"--launcher-image", "kvlive.test/virt-launcher:v1.9.0",
	)
	cmd.Stdout, cmd.Stderr = &log, &log
	// No service account file, so it takes its namespace from this.
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+KubeVirtNamespace)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("framework: start virt-controller: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		showTailIfFailed(t, "virt-controller", &log)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// Its own self-signed cert; this only asks whether it leads.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe of a test process
	}}
	leaderURL := fmt.Sprintf("https://127.0.0.1:%d/leader", port)
	deadline := time.Now().Add(virtControllerStartTimeout)
	for {
		resp, err := client.Get(leaderURL)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			showTail(t, "virt-controller", &log)
			t.Fatalf("framework: virt-controller exited before it led: %v", cmd.ProcessState)
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			showTail(t, "virt-controller", &log)
			t.Fatalf("framework: virt-controller did not lead within %v (GET %s: %v)", virtControllerStartTimeout, leaderURL, err)
		}
	}
}

// ServingCert writes a self-signed server certificate for 127.0.0.1 and its
// key into t.TempDir(); the certificate is its own CA.
func ServingCert(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := writeServingCert(certFile, keyFile); err != nil {
		t.Fatalf("framework: serving certificate: %v", err)
	}
	return certFile, keyFile
}

// writeServingCert writes a self-signed ECDSA certificate for 127.0.0.1.
func writeServingCert(certFile, keyFile string) error {
	return writeCert(certFile, keyFile, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "virt-controller.kvlive.test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// writeClientCert writes a self-signed client certificate that is its own
// CA, for a server to verify clients with.
func writeClientCert(certFile, keyFile string) error {
	return writeCert(certFile, keyFile, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kvlive"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
}

// writeCert writes a self-signed certificate from tmpl, valid for a day,
// and its key.
func writeCert(certFile, keyFile string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = big.NewInt(1)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// freeLoopbackPort asks the kernel for a free port on 127.0.0.1.
func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("framework: free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func ptr[T any](v T) *T { return &v }
