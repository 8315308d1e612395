package framework

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"kvlive/internal/testenv"
)

const (
	// natsStartTimeout bounds how long a node (or a cluster, for its
	// JetStream meta leader) may take to report healthy.
	natsStartTimeout = 30 * time.Second
	// natsStopTimeout is how long a node gets to shut down after SIGTERM
	// before it is killed.
	natsStopTimeout = 10 * time.Second
)

// NATSServer is one nats-server process with JetStream. Its ports and store
// directory are fixed for its lifetime, so Stop then Start brings the same
// server back with its streams, as a restarted pod with a persistent volume.
//
// Its methods fail the test they were created with, so call them from that
// test's goroutine.
type NATSServer struct {
	// URL is the client URL, nats://127.0.0.1:<port>.
	URL string
	// Name is the server_name, unique within a cluster.
	Name string
	// CAFile, for a server started by StartSecureNATS, is the certificate
	// its clients verify it with; ClientCert and ClientKey, with
	// NATSUsers.MutualTLS, the client certificate it requires.
	CAFile                string
	ClientCert, ClientKey string

	t          testing.TB
	binary     string
	configPath string
	healthURL  string
	log        testenv.LogBuffer
	cmd        *exec.Cmd
	exited     chan struct{}
}

// NATSCluster is a JetStream cluster of nats-server processes connected by
// routes on loopback.
type NATSCluster struct {
	// URL lists every node's client URL, comma separated, as nats.Connect
	// takes it.
	URL string
	// Nodes are the cluster's servers, each of which can be stopped and
	// started on its own.
	Nodes []*NATSServer

	t testing.TB
}

// natsNode holds what goes into one node's configuration file.
type natsNode struct {
	name        string
	clientPort  int
	monitorPort int
	clusterPort int // 0 outside a cluster
	storeDir    string
	// certFile and keyFile, when set, make clients use TLS; users, when
	// set, are the only ones let in (name to password).
	certFile, keyFile string
	users             map[string]string
	nkeys             []string
	// roles gives users a permissions variable defined in include, a
	// configuration file copied next to the node's and included by it.
	roles   map[string]string
	include string
	// token replaces users; clientCA makes the server verify clients.
	token    string
	clientCA string
	// raw is configuration added as it is (operator mode).
	raw string
}

// StartNATS starts a single nats-server from .bin/ with JetStream on free
// loopback ports and a store directory in t.TempDir(), and waits until it is
// healthy. It stops when the test ends.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	return startSingle(t, singleNode(t))
}

// singleNode is a lone server's node: free loopback ports, a store in
// t.TempDir().
func singleNode(t testing.TB) natsNode {
	t.Helper()
	ports := freePorts(t, 2)
	return natsNode{name: "kvlive-test", clientPort: ports[0], monitorPort: ports[1], storeDir: t.TempDir()}
}

// startSingle starts node as a lone server and waits until it is healthy.
func startSingle(t testing.TB, node natsNode) *NATSServer {
	t.Helper()
	s := newNATSServer(t, binaries(t, "nats-server")[0], node, "", nil)
	s.Start()
	return s
}

// NATSUsers are who a secured test NATS lets in: users by name and
// password, and users by NKey (their public keys).
type NATSUsers struct {
	Passwords map[string]string
	NKeys     []string
	// Roles limits users of Passwords to a permissions variable (user to
	// variable name, e.g. KVLIVE_PLANNER) defined in Permissions, a NATS
	// configuration file the server includes (deploy/nats's). Users
	// without a role may do anything.
	Roles       map[string]string
	Permissions string
	// Token, instead of users, is the one token the server accepts.
	Token string
	// MutualTLS makes the server require a client certificate: the one
	// in the server's ClientCert and ClientKey files.
	MutualTLS bool
}

// StartSecureNATS starts a single nats-server like StartNATS that requires
// TLS (a self-signed certificate for 127.0.0.1, in CAFile) and lets in only
// users.
func StartSecureNATS(t testing.TB, users NATSUsers) *NATSServer {
	t.Helper()
	bin := binaries(t, "nats-server")[0]
	ports := freePorts(t, 2)
	dir := t.TempDir()
	node := natsNode{
		name:        "kvlive-test",
		clientPort:  ports[0],
		monitorPort: ports[1],
		storeDir:    t.TempDir(),
		certFile:    filepath.Join(dir, "nats.crt"),
		keyFile:     filepath.Join(dir, "nats.key"),
		users:       users.Passwords,
		nkeys:       users.NKeys,
		roles:       users.Roles,
		token:       users.Token,
	}
	if err := writeServingCert(node.certFile, node.keyFile); err != nil {
		t.Fatalf("framework: nats certificate: %v", err)
	}
	var clientCert, clientKey string
	if users.MutualTLS {
		clientCert, clientKey = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
		if err := writeClientCert(clientCert, clientKey); err != nil {
			t.Fatalf("framework: nats client certificate: %v", err)
		}
		node.clientCA = clientCert
	}
	if users.Permissions != "" {
		// nats-server includes files relative to the including one.
		raw, err := os.ReadFile(users.Permissions)
		if err != nil {
			t.Fatalf("framework: nats permissions: %v", err)
		}
		node.include = filepath.Base(users.Permissions)
		if err := os.WriteFile(filepath.Join(dir, node.include), raw, 0o600); err != nil {
			t.Fatalf("framework: nats permissions: %v", err)
		}
	}
	s := newNATSServer(t, bin, node, "", nil)
	s.CAFile, s.ClientCert, s.ClientKey = node.certFile, clientCert, clientKey
	s.Start()
	return s
}

// StartNATSCluster starts a JetStream cluster of n nats-server processes
// (n >= 3 for replicated streams) and waits until every node is healthy,
// which includes a JetStream meta leader being elected. It stops when the
// test ends.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	if n < 2 {
		t.Fatalf("framework: a NATS cluster needs at least 2 nodes, got %d", n)
	}
	bin := binaries(t, "nats-server")[0]
	nodes := make([]natsNode, n)
	routes := make([]string, n)
	ports := freePorts(t, 3*n)
	for i := range nodes {
		nodes[i] = natsNode{
			name:        fmt.Sprintf("kvlive-test-%d", i),
			clientPort:  ports[3*i],
			monitorPort: ports[3*i+1],
			clusterPort: ports[3*i+2],
			storeDir:    t.TempDir(),
		}
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", nodes[i].clusterPort)
	}

	c := &NATSCluster{t: t}
	urls := make([]string, n)
	for i, node := range nodes {
		s := newNATSServer(t, bin, node, "kvlive-test", routes)
		c.Nodes = append(c.Nodes, s)
		urls[i] = s.URL
	}
	c.URL = strings.Join(urls, ",")
	c.Start()
	return c
}

// Start starts every node that is not running and waits until all are
// healthy. Nodes are launched together: a lone node cannot elect a
// JetStream meta leader and would never report healthy.
func (c *NATSCluster) Start() {
	c.t.Helper()
	for _, s := range c.Nodes {
		if s.cmd == nil {
			s.launch()
		}
	}
	for _, s := range c.Nodes {
		s.waitHealthy()
	}
}

func newNATSServer(t testing.TB, bin string, node natsNode, cluster string, routes []string) *NATSServer {
	t.Helper()
	dir := t.TempDir()
	if node.certFile != "" {
		dir = filepath.Dir(node.certFile) // next to what it includes
	}
	configPath := filepath.Join(dir, node.name+".conf")
	if err := os.WriteFile(configPath, []byte(natsConfig(node, cluster, routes)), 0o600); err != nil {
		t.Fatalf("framework: write nats config: %v", err)
	}
	s := &NATSServer{
		URL:        fmt.Sprintf("nats://127.0.0.1:%d", node.clientPort),
		Name:       node.name,
		t:          t,
		binary:     bin,
		configPath: configPath,
		healthURL:  fmt.Sprintf("http://127.0.0.1:%d/healthz", node.monitorPort),
	}
	t.Cleanup(func() {
		showTailIfFailed(t, "nats-server "+s.Name, &s.log)
		s.Stop()
	})
	return s
}

// natsConfig renders a node's configuration file. JetStream limits are set
// so the servers do not size themselves from the machine's memory and disk.
func natsConfig(n natsNode, cluster string, routes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\n", n.name)
	fmt.Fprintf(&b, "listen: \"127.0.0.1:%d\"\n", n.clientPort)
	fmt.Fprintf(&b, "http: \"127.0.0.1:%d\"\n", n.monitorPort)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  max_memory_store: 256MB\n  max_file_store: 2GB\n}\n", n.storeDir)
	if n.certFile != "" {
		fmt.Fprintf(&b, "tls {\n  cert_file: %q\n  key_file: %q\n", n.certFile, n.keyFile)
		if n.clientCA != "" {
			fmt.Fprintf(&b, "  ca_file: %q\n  verify: true\n", n.clientCA)
		}
		b.WriteString("}\n")
	}
	if n.token != "" {
		fmt.Fprintf(&b, "authorization {\n  token: %q\n}\n", n.token)
	}
	if len(n.users)+len(n.nkeys) > 0 {
		if n.include != "" {
			fmt.Fprintf(&b, "include %q\n", n.include)
		}
		b.WriteString("authorization {\n  users: [\n")
		for _, user := range slices.Sorted(maps.Keys(n.users)) {
			if role, ok := n.roles[user]; ok {
				fmt.Fprintf(&b, "    {user: %q, password: %q, permissions: $%s}\n", user, n.users[user], role)
				continue
			}
			fmt.Fprintf(&b, "    {user: %q, password: %q}\n", user, n.users[user])
		}
		for _, key := range n.nkeys {
			fmt.Fprintf(&b, "    {nkey: %q}\n", key)
		}
		b.WriteString("  ]\n}\n")
	}
	b.WriteString(n.raw)
	if cluster != "" {
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  routes: [\n", cluster, n.clusterPort)
		for _, r := range routes {
			fmt.Fprintf(&b, "    %q\n", r)
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// Start launches the server if it is not running and waits until it is
// healthy. A cluster node started alone becomes healthy only if the rest of
// its cluster still has a JetStream meta leader.
func (s *NATSServer) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	started := time.Now()
	s.launch()
	s.waitHealthy()
	s.t.Logf("framework: nats-server %s healthy %s after its start", s.Name, time.Since(started).Round(time.Millisecond))
}

// MonitorURL is the server's HTTP monitoring endpoint (/varz, /jsz).
func (s *NATSServer) MonitorURL() string { return strings.TrimSuffix(s.healthURL, "/healthz") }

// Log returns what the server has written so far.
func (s *NATSServer) Log() string { return s.log.String() }

// Stop shuts the server down gracefully (SIGTERM) and waits for it to exit,
// killing it after a timeout. Stopping a stopped server does nothing.
func (s *NATSServer) Stop() {
	s.t.Helper()
	s.stop(syscall.SIGTERM)
}

// Kill ends the server with SIGKILL, as a crash would.
func (s *NATSServer) Kill() {
	s.t.Helper()
	s.stop(syscall.SIGKILL)
}

// Restart stops the server and starts it again on the same ports and store.
func (s *NATSServer) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

func (s *NATSServer) launch() {
	s.t.Helper()
	_, _ = fmt.Fprintf(&s.log, "--- framework: starting %s\n", s.Name)
	cmd := exec.Command(s.binary, "-c", s.configPath)
	cmd.Stdout, cmd.Stderr = &s.log, &s.log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("framework: start nats-server %s: %v", s.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
}

// waitHealthy polls the monitoring endpoint's /healthz, which with JetStream
// enabled answers 200 only once JetStream is ready (in a cluster: a meta
// leader is known and this node is current).
func (s *NATSServer) waitHealthy() {
	s.t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(natsStartTimeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			showTail(s.t, "nats-server "+s.Name, &s.log)
			s.cmd = nil
			s.t.Fatalf("framework: nats-server %s exited during start", s.Name)
		default:
		}
		resp, err := client.Get(s.healthURL)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	showTail(s.t, "nats-server "+s.Name, &s.log)
	s.t.Fatalf("framework: nats-server %s not healthy after %v: %s", s.Name, natsStartTimeout, last)
}

func (s *NATSServer) stop(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	defer func() { s.cmd = nil }()
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("framework: signal nats-server %s: %v", s.Name, err)
	}
	select {
	case <-s.exited:
	case <-time.After(natsStopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.t.Errorf("framework: nats-server %s did not stop within %v; killed", s.Name, natsStopTimeout)
	}
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. The listeners stay open until all are chosen, so no port is handed
// out twice; the small race with other processes is acceptable in tests.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("framework: find a free port: %v", err)
		}
		listeners = append(listeners, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}
