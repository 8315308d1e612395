//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"kvlive/events"
	"kvlive/integration/framework"
)

// completeLine is the state line of a complete rollout in kvlive rollout
// status (not "incomplete").
var completeLine = regexp.MustCompile(`(?m)^state:\s+complete$`)

// TestKvliveOnASecuredNATS runs kvlive against a nats-server that requires
// TLS and a user: kvlive run rolls an edit out and the read commands see
// it, with the CA and the user's password from a file, or an NKey seed. A wrong password
// and a missing CA fail at once, saying why, for run and the CLI alike.
func TestKvliveOnASecuredNATS(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	public, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 10}, secureNATS: true, natsNKeys: []string{public}})
	e.runKvlive("all stages")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})
	// Every VM has an outcome; KubeVirt's verdicts may still be awaited,
	// which --watch follows until the rollout is done.
	status := append([]string{"rollout", "status", eventID, "--nats-url", e.natsURL}, e.natsArgs...)
	e.kvliveCommand(4*time.Minute, append(status, "--watch", "--timeout", "3m")...)
	if out := e.kvliveCommand(time.Minute, status...); !completeLine.MatchString(out) {
		t.Errorf("rollout status over TLS as kvlive:\n%s", out)
	}
	out := e.kvliveCommand(time.Minute, "events", "--nats-url", e.natsURL, "--nats-ca", e.nats.CAFile, "--nats-nkey", seedFile)
	if !strings.Contains(out, events.ShortEventID(eventID)) {
		t.Errorf("kvlive events as an NKey user:\n%s", out)
	}

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.checkRefused("a wrong password", "--nats-ca", e.nats.CAFile, "--nats-user", "kvlive", "--nats-password-file", wrong)
	stderr := e.kvliveFails(time.Minute, "events", "--nats-url", e.natsURL, "--nats-user", "kvlive", "--nats-password-file", wrong)
	if !strings.Contains(stderr, "certificate") && !strings.Contains(stderr, "tls") && !strings.Contains(stderr, "TLS") {
		t.Errorf("kvlive events without the CA said %q, want a TLS error", stderr)
	}
}

// TestKvliveWithACredsFile runs kvlive on a nats-server in operator mode,
// the JWT authentication nsc sets up: with a user's credentials file kvlive
// run rolls an edit out and kvlive events lists it; a credentials file of
// an account the server does not know fails at once, for run and the CLI
// alike.
func TestKvliveWithACredsFile(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 10}, credsNATS: true})
	e.runKvlive("all stages")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})
	if out := e.kvliveCommand(time.Minute, append([]string{"events", "--nats-url", e.natsURL}, e.natsArgs...)...); !strings.Contains(out, events.ShortEventID(eventID)) {
		t.Errorf("kvlive events with a creds file:\n%s", out)
	}

	e.checkRefused("another account's creds", "--nats-creds", framework.CredsOfAnotherAccount(t))
}

// checkRefused runs kvlive events and kvlive run with creds (flags after
// --nats-url) and wants both refused at once as wrong credentials.
func (e *env) checkRefused(what string, creds ...string) {
	e.t.Helper()
	for _, args := range [][]string{
		append([]string{"events", "--nats-url", e.natsURL}, creds...),
		append([]string{"run", "--kubeconfig", e.kubeconfig, "--metrics-addr", "", "--nats-url", e.natsURL}, creds...),
	} {
		if stderr := e.kvliveFails(time.Minute, args...); !strings.Contains(stderr, "refused kvlive's credentials") {
			e.t.Errorf("kvlive %s with %s said %q", args[0], what, stderr)
		}
	}
}

// TestKvliveWithATokenOverMutualTLS runs kvlive on a nats-server that
// requires a token and a client certificate: kvlive run rolls an edit out
// with both; without the client certificate the CLI fails at once, saying
// so, and with a wrong token it says its credentials were refused.
func TestKvliveWithATokenOverMutualTLS(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 10}, tokenNATS: true})
	e.runKvlive("all stages")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})
	if out := e.kvliveCommand(time.Minute, append([]string{"events", "--nats-url", e.natsURL}, e.natsArgs...)...); !strings.Contains(out, events.ShortEventID(eventID)) {
		t.Errorf("kvlive events with a token and a client certificate:\n%s", out)
	}

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	certs := []string{"--nats-ca", e.nats.CAFile, "--nats-cert", e.nats.ClientCert, "--nats-key", e.nats.ClientKey}
	e.checkRefused("a wrong token", append([]string{"--nats-token-file", wrong}, certs...)...)
	stderr := e.kvliveFails(time.Minute, "events", "--nats-url", e.natsURL, "--nats-ca", e.nats.CAFile, "--nats-token-file", wrong)
	if lower := strings.ToLower(stderr); !strings.Contains(lower, "certificate") && !strings.Contains(lower, "tls") {
		t.Errorf("kvlive events without a client certificate said %q, want the TLS error", stderr)
	}
}

// busRoles are the users TestLeastPrivilegeOnTheBus connects as, each with
// its role in deploy/nats/kvlive-permissions.conf.
var busRoles = map[string]string{
	"kvlive-watcher":  "KVLIVE_WATCHER",
	"kvlive-planner":  "KVLIVE_PLANNER",
	"kvlive-applier":  "KVLIVE_APPLIER",
	"kvlive-reader":   "KVLIVE_READER",
	"kvlive-operator": "KVLIVE_OPERATOR",
}

// TestLeastPrivilegeOnTheBus runs each stage as its own NATS user with the
// shipped permissions (deploy/nats): an edit and a batched switch roll out
// with nothing refused, the reader reads every record, and the reader can
// neither publish a plan nor request a switch.
func TestLeastPrivilegeOnTheBus(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 20}, secureNATS: true, natsRoles: busRoles})
	for _, stage := range []string{"watcher", "planner", "applier"} {
		e.runKvlive(stage, append([]string{"--stages", stage}, e.natsUser("kvlive-"+stage)...)...)
	}
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})

	operator, reader := e.natsUser("kvlive-operator"), e.natsUser("kvlive-reader")
	out := e.kvliveCommand(rolloutTimeout, append([]string{"switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A",
		"--from", "clusterinstancetype/" + itMedium, "--to", "clusterinstancetype/" + itLarge, "-l", "tier=web",
		"--batch-size", "50%", "--wait"}, operator...)...)
	m := switchOutput.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kvlive switch as the operator printed %q", out)
	}
	web := e.selectShapes(func(s vmShape) bool { return s.instancetype == itMedium && s.tier == "web" })
	e.checkRollout(e.follow(m[1]), rolloutWant{eventID: m[1], shapes: web, action: vmShape.expected, clean: true})

	for _, args := range [][]string{
		{"events"}, {"rollouts"}, {"rollout", "status", m[1]}, {"outcomes", "--event", eventID}, {"dlq", "list"},
	} {
		e.kvliveCommand(time.Minute, append(append(args, "--nats-url", e.natsURL), reader...)...)
	}
	// The stages export spans in batches, up to 5 s after they end: the
	// switch above can finish sooner.
	e.waitFor("the edit's trace, read as kvlive-reader", time.Minute, func() (bool, string) {
		_, stderr, err := e.kvliveOnce(time.Minute, append([]string{"trace", eventID, "--nats-url", e.natsURL}, reader...)...)
		return err == nil, fmt.Sprint(err, ": ", stderr.String())
	})
	if log := e.nats.Log(); strings.Contains(log, "Violation") {
		t.Errorf("nats-server refused a kvlive stage or the reader something:\n%s", violations(log))
	}

	stderr := e.kvliveFails(time.Minute, append([]string{"switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A",
		"--from", "clusterinstancetype/" + itLarge, "--to", "clusterinstancetype/" + itMedium, "--yes"}, reader...)...)
	// Its preview's request is refused too, and said so at once: no wait
	// for a reply that cannot come, then the cluster read instead.
	if !refusedFor(stderr, "kvlive.events.switch") || strings.Contains(stderr, "did not preview the switch") {
		t.Errorf("kvlive switch as the reader said %q, want the switch request's permissions error, its preview refused at once", stderr)
	}
	readerJS := connect(t, e.natsURL, nats.RootCAs(e.nats.CAFile), nats.UserInfo("kvlive-reader", "kvlive-reader-"+natsPassword))
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	before := e.lastSequence(events.StreamPlans)
	_, err := readerJS.PublishMsg(ctx, events.NewMsg(events.PlanSubject("default", "forged"), "forged/vm", events.TypePlan, []byte("{}")))
	if err == nil {
		t.Error("the reader published a plan")
	}
	if after := e.lastSequence(events.StreamPlans); after != before {
		t.Errorf("the plans stream's last sequence went from %d to %d after the reader's publish", before, after)
	}
	if !strings.Contains(violations(e.nats.Log()), `user:kvlive-reader" - Publish Violation - Subject "kvlive.plans.`) {
		t.Errorf("nats-server did not refuse the reader's plan:\n%s", violations(e.nats.Log()))
	}
}

// lastSequence is the sequence of the last message a stream stored.
func (e *env) lastSequence(stream string) uint64 {
	e.t.Helper()
	s, err := e.js.Stream(e.ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.LastSeq
}

// refusedFor reports whether a kvlive command's standard error has
// nats-server's permissions violation for a publish to subject.
func refusedFor(stderr, subject string) bool {
	for line := range strings.Lines(stderr) {
		if strings.Contains(line, "Permissions Violation for Publish to") && strings.Contains(line, subject) {
			return true
		}
	}
	return false
}

// violations returns the permission violations in a nats-server log.
func violations(log string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		if strings.Contains(line, "Violation") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestEmbeddedServerSharedBeyondLoopback runs `kvlive run` with its
// embedded server on every interface, as --listen-config allows: a
// nats-server configuration with the shipped roles and TLS. kvlive's own
// stages roll an edit out; over the network, the operator reads and
// switches, the reader reads but cannot request a switch, a wrong password
// is refused, and a client that will not speak TLS gets nowhere.
func TestEmbeddedServerSharedBeyondLoopback(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 10}})
	dir := t.TempDir()
	perms, err := os.ReadFile(filepath.Join(framework.RepoRoot(t), "deploy", "nats", "kvlive-permissions.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kvlive-permissions.conf"), perms, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := framework.ServingCert(t)
	conf := filepath.Join(dir, "listen.conf")
	// Every role has a user: nats-server refuses variables nothing uses.
	var users strings.Builder
	for _, name := range slices.Sorted(maps.Keys(busRoles)) {
		fmt.Fprintf(&users, "    {user: %q, password: %q, permissions: $%s}\n", name, name+"-"+natsPassword, busRoles[name])
	}
	if err := os.WriteFile(conf, fmt.Appendf(nil, "include \"kvlive-permissions.conf\"\nauthorization {\n  users: [\n%s  ]\n}\ntls {\n  cert_file: %q\n  key_file: %q\n}\n",
		users.String(), cert, key), 0o600); err != nil {
		t.Fatal(err)
	}
	port, dataDir := freePort(t), t.TempDir()
	e.startKvlive("embedded, shared", []string{"run", "--kubeconfig", e.kubeconfig, "--data-dir", dataDir,
		"--listen", fmt.Sprintf("0.0.0.0:%d", port), "--listen-config", conf, "--metrics-addr", "127.0.0.1:0"})
	e.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	user := func(name string) []string {
		password := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(password, []byte(name+"-"+natsPassword), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--nats-ca", cert, "--nats-user", name, "--nats-password-file", password}
	}
	operator, reader := user("kvlive-operator"), user("kvlive-reader")
	e.waitFor("kvlive run's embedded server", time.Minute, func() (bool, string) {
		nc, err := nats.Connect(e.natsURL, nats.RootCAs(cert), nats.UserInfo("kvlive-operator", "kvlive-operator-"+natsPassword))
		if err != nil {
			return false, err.Error()
		}
		nc.Close()
		return true, ""
	})
	e.js = connect(t, e.natsURL, nats.RootCAs(cert), nats.UserInfo("kvlive-operator", "kvlive-operator-"+natsPassword))
	e.waitGenerations()

	_, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	if p := e.follow(eventID); len(p.Outcomes) != len(edited) {
		t.Fatalf("%d outcomes of %d VMs", len(p.Outcomes), len(edited))
	}
	e.checkWrites(edited, nil)

	out := e.kvliveCommand(rolloutTimeout, append([]string{"switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A",
		"--from", "clusterinstancetype/" + itMedium, "--to", "clusterinstancetype/" + itLarge, "--wait"}, operator...)...)
	if !switchOutput.MatchString(out) {
		t.Errorf("kvlive switch as the operator printed %q", out)
	}
	// By URL, and by the store the process advertises (at loopback, which
	// its certificate names, not 0.0.0.0).
	for _, at := range [][]string{{"--nats-url", e.natsURL}, {"--data-dir", dataDir}} {
		if out := e.kvliveCommand(time.Minute, append(append([]string{"events"}, at...), reader...)...); !strings.Contains(out, events.ShortEventID(eventID)) {
			t.Errorf("kvlive events %s as the reader:\n%s", at[0], out)
		}
	}
	stderr := e.kvliveFails(time.Minute, append([]string{"switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A",
		"--from", "clusterinstancetype/" + itLarge, "--to", "clusterinstancetype/" + itMedium, "--yes"}, reader...)...)
	if !refusedFor(stderr, "kvlive.events.switch") {
		t.Errorf("kvlive switch as the reader said %q, want the switch request's permissions error", stderr)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.checkRefused("a wrong password", "--nats-ca", cert, "--nats-user", "kvlive-operator", "--nats-password-file", wrong)
	stderr = e.kvliveFails(time.Minute, "events", "--nats-url", e.natsURL, "--nats-user", "kvlive-reader", "--nats-password-file", reader[len(reader)-1])
	if lower := strings.ToLower(stderr); !strings.Contains(lower, "tls") && !strings.Contains(lower, "certificate") {
		t.Errorf("kvlive events without TLS said %q, want the TLS error", stderr)
	}
}
