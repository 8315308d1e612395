//go:build integration

package integration

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/integration/framework"
	"kvlive/internal/bus"
	"kvlive/internal/kube"
	"kvlive/internal/standin"
	"kvlive/internal/testenv"
)

// Deadlines. They bound waits for conditions; nothing is asserted on time.
const (
	// settleTimeout bounds waiting for the stand-in to act on a fleet.
	settleTimeout = 4 * time.Minute
	// rolloutTimeout bounds one rollout, restarts and redeliveries included.
	rolloutTimeout = 5 * time.Minute
	// pollInterval is how often waits look again.
	pollInterval = 250 * time.Millisecond
)

// env is one test's world: a real API server (with an audit log), a NATS
// server process, the stand-in playing virt-controller in this process, a
// seeded fleet, and the kvlive processes the test started.
type env struct {
	t          *testing.T
	ctx        context.Context
	kubeconfig string
	auditLog   string
	plansTap   *planTap
	clients    kube.Clients
	// nats is the test's nats-server, or nil with natsCluster, whose
	// nodes run instead; natsURL reaches either.
	nats        *framework.NATSServer
	natsCluster *framework.NATSCluster
	natsURL     string
	js          jetstream.JetStream
	// standin is the virt-controller stand-in startStandin runs.
	standin *standin.Controller
	// stopStandin stops it (idempotent): after it nothing reacts to
	// kvlive's writes.
	stopStandin func()
	shapes      []vmShape
	// uids are the seeded VMs' UIDs by namespace/name, which plans and
	// outcomes are keyed by; they outlive a VM the test deletes.
	uids map[string]string

	// extraEnv is added to the environment of kvlive processes started
	// after it is set (e.g. OTEL_* to export to a test's OTLP receiver).
	extraEnv []string
	// natsArgs are the flags that reach a secured NATS (TLS, a user).
	natsArgs []string
	// followSlice, when set, replaces the const followSlice: the bench
	// follows a 10,000-VM rollout in longer slices, since each slice reads
	// the rollout's outcomes again from its first.
	followSlice time.Duration
	// followTimeout, when set, replaces rolloutTimeout as the bound on
	// following one rollout: the bench's large fleets take longer.
	followTimeout time.Duration
	// onRollout, when set, is called by the bench's stoppedRollout with
	// the rollout's event id as soon as it is known; what it returns is
	// called once the rollout's outcomes are all in.
	onRollout func(id string) (done func())

	mu    sync.Mutex
	procs []*kvliveProc
}

// natsPassword is the kvlive user's password on a secured test NATS.
const natsPassword = "kvlive-test-password"

// newEnv starts the servers and the stand-in, seeds the fleet, and waits
// until the stand-in pinned every VM and recorded every VMI's boot pins.
func newEnv(t *testing.T, o fleetOptions) *env {
	t.Helper()
	cfg, kubeconfig, auditLog := framework.StartAPIServerWithAudit(t)
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	clients, err := kube.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: t.Context(), kubeconfig: kubeconfig, auditLog: auditLog, clients: clients, shapes: o.shapes()}
	if o.secureNATS {
		password := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(password, []byte(natsPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		users := framework.NATSUsers{Passwords: map[string]string{"kvlive": natsPassword}, NKeys: o.natsNKeys, Roles: o.natsRoles}
		for user := range o.natsRoles {
			users.Passwords[user] = user + "-" + natsPassword
		}
		if len(o.natsRoles) > 0 {
			users.Permissions = filepath.Join(framework.RepoRoot(t), "deploy", "nats", "kvlive-permissions.conf")
		}
		e.nats = framework.StartSecureNATS(t, users)
		e.natsURL = e.nats.URL
		e.natsArgs = []string{"--nats-ca", e.nats.CAFile, "--nats-user", "kvlive", "--nats-password-file", password}
		e.js = connect(t, e.natsURL, nats.RootCAs(e.nats.CAFile), nats.UserInfo("kvlive", natsPassword))
	} else if o.tokenNATS {
		token := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(token, []byte(natsPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		e.nats = framework.StartSecureNATS(t, framework.NATSUsers{Token: natsPassword, MutualTLS: true})
		e.natsURL = e.nats.URL
		e.natsArgs = []string{"--nats-ca", e.nats.CAFile, "--nats-cert", e.nats.ClientCert, "--nats-key", e.nats.ClientKey, "--nats-token-file", token}
		e.js = connect(t, e.natsURL, nats.RootCAs(e.nats.CAFile), nats.ClientCert(e.nats.ClientCert, e.nats.ClientKey), nats.Token(natsPassword))
	} else if o.credsNATS {
		var creds string
		e.nats, creds = framework.StartOperatorNATS(t)
		e.natsURL = e.nats.URL
		e.natsArgs = []string{"--nats-creds", creds}
		e.js = connect(t, e.natsURL, nats.UserCredentials(creds))
	} else if o.natsCluster > 0 {
		e.natsCluster = framework.StartNATSCluster(t, o.natsCluster)
		e.natsURL = e.natsCluster.URL
		e.js = connect(t, e.natsURL)
	} else {
		e.nats = framework.StartNATS(t)
		e.natsURL = e.nats.URL
		e.js = connect(t, e.natsURL)
	}
	e.plansTap = tapPlans(t, e.js)
	e.startStandin(o.migration)
	seed(e.ctx, t, clients, o, e.shapes)
	e.waitPinned()
	e.uids = map[string]string{}
	for key, vm := range e.fleetView().vms {
		e.uids[key] = string(vm.UID)
	}
	return e
}

// natsUser returns the flags that connect to the secured NATS as user, one
// of fleetOptions.natsRoles; given after env.natsArgs, they take over.
func (e *env) natsUser(user string) []string {
	e.t.Helper()
	password := filepath.Join(e.t.TempDir(), user+"-password")
	if err := os.WriteFile(password, []byte(user+"-"+natsPassword), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return []string{"--nats-ca", e.nats.CAFile, "--nats-user", user, "--nats-password-file", password}
}

// planTap records every plan published, keeping the first body per
// Nats-Msg-Id as JetStream does: the plans stream is a work queue, so a
// plan is gone from it once applied, and the checks still need it.
type planTap struct {
	mu     sync.Mutex
	order  []string
	bodies map[string][]byte
	// gapped is set once the tap's connection reconnected: a plan
	// published before it subscribed again (kvlive may reconnect first
	// after a NATS restart) was never seen.
	gapped atomic.Bool
}

func tapPlans(t *testing.T, js jetstream.JetStream) *planTap {
	t.Helper()
	tp := &planTap{bodies: map[string][]byte{}}
	sub, err := js.Conn().Subscribe("kvlive.plans.>", func(m *nats.Msg) {
		id := m.Header.Get(jetstream.MsgIDHeader)
		if fastBatchControl(m) {
			return // not stored: no plan
		}
		tp.mu.Lock()
		defer tp.mu.Unlock()
		if _, seen := tp.bodies[id]; !seen || id == "" {
			tp.order = append(tp.order, id)
			tp.bodies[id] = m.Data
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	js.Conn().SetReconnectHandler(func(*nats.Conn) { tp.gapped.Store(true) })
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return tp
}

// fastBatchControl reports whether m is the end or a ping of a fast batch
// (the planner publishes a rollout's plans as one): an empty message on
// the batch's subject, which nats-server reads and does not store.
func fastBatchControl(m *nats.Msg) bool {
	return strings.HasSuffix(m.Reply, ".$FI") && len(m.Data) == 0 && m.Header.Get(jetstream.MsgIDHeader) == ""
}

// all returns the recorded plan bodies, oldest first.
func (tp *planTap) all() [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make([][]byte, 0, len(tp.order))
	for _, id := range tp.order {
		out = append(out, tp.bodies[id])
	}
	return out
}

// connect opens the test's own JetStream connection, which reconnects for
// ever, so a NATS restart only pauses the test's reads, and its reads of
// streams and buckets ride out a leader election by kvlive's own rule
// (bus.Reads), so a test fails on kvlive, not on its harness. The
// connection is built here, not with kvlive's helpers.
func connect(t *testing.T, url string, extra ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("kvlive-integration"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.NewJetStream(nc, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// standinReaction is how long the stand-in takes to react to a moved pin:
// virt-controller reacts when its queue gets to the VM, and until then the
// VM shows what it said before, which no verdict may take for the answer.
const standinReaction = 300 * time.Millisecond

// startStandin runs the virt-controller stand-in, its migrations taking
// migration each, until the test ends; its log is shown if the test fails.
func (e *env) startStandin(migration time.Duration) {
	e.t.Helper()
	var log testenv.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := kube.NewWholeCache(e.clients, "")
	if err != nil {
		e.t.Fatal(err)
	}
	c := standin.New(standin.Config{
		Kube: fleet.Clients.Kube, Virt: fleet.Clients.Virt,
		VMs: fleet.VMInformer(), VMIs: fleet.VMIInformer(), KubeVirts: fleet.KubeVirtInformer(), Workers: 16, MigrationDuration: migration,
		ReactionDelay: standinReaction,
		Log:           slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	e.standin = c
	fleet.Start(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	e.stopStandin = sync.OnceFunc(func() {
		cancel()
		fleet.Shutdown()
		if err := <-done; err != nil {
			e.t.Errorf("stand-in: %v", err)
		}
	})
	e.t.Cleanup(func() {
		e.stopStandin()
		if e.t.Failed() && log.Len() > 0 {
			e.t.Logf("stand-in log:\n%s", log.String())
		}
	})
}

// waitPinned waits until every VM has a status pin and every VMI the
// stand-in's record of the pins it booted with.
func (e *env) waitPinned() {
	e.t.Helper()
	// The stand-in pins about 150 VMs a second on two cores, fewer on a
	// busy machine: a bench's 100,000-VM fleet takes longer than any test's.
	timeout := max(settleTimeout, time.Duration(len(e.shapes))*30*time.Millisecond)
	e.waitFor("the stand-in to pin every VM", timeout, func() (bool, string) {
		v := e.fleetView()
		unpinned := 0
		for _, vm := range v.vms {
			if r := vm.Status.InstancetypeRef; r == nil || r.ControllerRevisionRef == nil || r.ControllerRevisionRef.Name == "" {
				unpinned++
			}
		}
		unbooted := 0
		for _, vmi := range v.vmis {
			if vmi.Annotations[standin.AnnotationBootPins] == "" {
				unbooted++
			}
		}
		ok := len(v.vms) == len(e.shapes) && unpinned == 0 && unbooted == 0
		return ok, plural(unpinned, "VM") + " unpinned, " + plural(unbooted, "VMI") + " without boot pins"
	})
}

// waitGenerations waits until the watcher recorded every instance type in
// the generations bucket: only then is an edit a change it can see.
func (e *env) waitGenerations() {
	e.t.Helper()
	e.waitFor("the watcher to record every instance type", time.Minute, func() (bool, string) {
		kv, err := e.js.KeyValue(e.ctx, events.BucketGenerations)
		if err != nil {
			return false, err.Error()
		}
		keys, err := kv.Keys(e.ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			return false, err.Error()
		}
		return len(keys) == len(instancetypes), plural(len(keys), "key")
	})
}

// editInstancetype changes a cluster instance type's spec through the API,
// as kubectl edit would; the API server moves metadata.generation. It
// returns the object as stored and the id of the event the edit must cause.
func (e *env) editInstancetype(name string, vcpus uint32, mem string) (*v1beta1.VirtualMachineClusterInstancetype, string) {
	e.t.Helper()
	its := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	it, err := its.Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get %s: %v", name, err)
	}
	before := it.Generation
	it.Spec = itSpec(vcpus, mem)
	if it, err = its.Update(e.ctx, it, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("edit %s: %v", name, err)
	}
	if it.Generation != before+1 {
		e.t.Fatalf("edit %s: generation %d → %d, want one step", name, before, it.Generation)
	}
	return it, events.EventID(events.KindClusterInstancetype, string(it.UID), it.Generation)
}

// instancetype reads a cluster instance type as stored now.
func (e *env) instancetype(name string) *v1beta1.VirtualMachineClusterInstancetype {
	e.t.Helper()
	it, err := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get %s: %v", name, err)
	}
	return it
}

// selectShapes returns the fleet's VMs that match.
func (e *env) selectShapes(match func(vmShape) bool) []vmShape {
	var out []vmShape
	for _, s := range e.shapes {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// onInstancetype matches the VMs seeded on the named instance type.
func onInstancetype(name string) func(vmShape) bool {
	return func(s vmShape) bool { return s.instancetype == name }
}

// metricLines returns the lines of a /metrics page whose series is name,
// for a failure to quote.
func metricLines(page, name string) string {
	var lines []string
	for line := range strings.Lines(page) {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return strings.Join(lines, "; ")
}

// prunerBacklogDrained is the /metrics line of a kvlive run whose revision
// pruner has no VM left to look at.
const prunerBacklogDrained = `kvlive_queue_depth{queue="pruner"} 0` + "\n"

// waitFor polls cond until it holds, failing the test after timeout, or as
// soon as a kvlive process the test did not stop has exited. cond returns
// whether it holds and a status line for the failure message.
func (e *env) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, status := cond()
		if ok {
			return
		}
		e.checkProcs()
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, status)
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("waiting for %s: %v", what, e.ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}
