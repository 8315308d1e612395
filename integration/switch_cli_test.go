//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"k8s.io/client-go/tools/clientcmd"

	"kvlive/events"
	"kvlive/planner/offline"
	"kvlive/rollout"
)

// TestSwitchPreviewsAsksAndRunsWhatItShowed tries kvlive switch as an
// operator on a terminal would, scoped by the kubeconfig context's
// namespace (plan's default and switch's): plan --from --to previews the
// VMs; a typo in --to is an error; the switch prints the same plan, sized
// to the terminal, and asks; "n" requests nothing; "y" requests the switch,
// and --wait gives up at --timeout saying it is queued; once kvlive runs,
// rollout status --watch follows it to the end, and exactly the VMs shown
// are moved.
func TestSwitchPreviewsAsksAndRunsWhatItShowed(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 3, perIT: map[string]int{itMedium: 30}})
	if err := events.Setup(e.ctx, e.js, events.DefaultStreamOptions(), nil); err != nil {
		t.Fatal(err)
	}
	ns := e.shapes[0].namespace
	kubeconfig := e.kubeconfigIn(ns)
	from, to := "clusterinstancetype/"+itMedium, "clusterinstancetype/"+itLarge
	want := e.selectShapes(func(s vmShape) bool { return s.namespace == ns && s.instancetype == itMedium && s.tier == "web" })
	if len(want) == 0 {
		t.Fatalf("the fleet has no web VM on %s in %s", itMedium, ns)
	}

	var preview offline.Report
	out := e.kvliveCommand(time.Minute, "plan", "--from", from, "--to", to, "-l", "tier=web", "-o", "json", "--kubeconfig", kubeconfig)
	if err := json.Unmarshal([]byte(out), &preview); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	if len(preview.VMs) != len(want) {
		t.Errorf("plan --from --to previewed %d VMs, want the %d web VMs of %s", len(preview.VMs), len(want), ns)
	}

	stderr := e.kvliveFails(time.Minute, "switch", "--from", from, "--to", "clusterinstancetype/u1.nope", "--yes",
		"--kubeconfig", kubeconfig, "--nats-url", e.natsURL)
	if !strings.Contains(stderr, "clusterinstancetype/u1.nope does not exist") {
		t.Errorf("switch --to a typo said %q", stderr)
	}

	args := []string{"switch", "--from", from, "--to", to, "-l", "tier=web", "--kubeconfig", kubeconfig, "--nats-url", e.natsURL}
	const cols = 100
	screen, err := e.kvliveOnTerminal("n", cols, args...)
	if err == nil || !strings.Contains(screen, "not confirmed: nothing was requested") {
		t.Errorf("switch answered n: %v\n%s", err, screen)
	}
	for _, w := range []string{fmt.Sprintf("%d VMs: ", len(want)), fmt.Sprintf("Switch these %d VMs from %s to %s? [y/N]", len(want), from, to)} {
		if !strings.Contains(screen, w) {
			t.Errorf("switch on a terminal did not show %q:\n%s", w, screen)
		}
	}
	for line := range strings.Lines(screen) {
		if n := utf8.RuneCountInString(strings.TrimRight(line, "\r\n")); n > cols {
			t.Errorf("a line of %d columns on a %d-column terminal: %q", n, cols, line)
		}
	}
	if n := len(e.streamBodies(events.StreamEvents)); n != 0 {
		t.Fatalf("declined, yet %d events were published", n)
	}

	screen, err = e.kvliveOnTerminal("y", cols, append(args, "--wait", "--timeout", "3s", "--batch-size", "50%")...)
	m := regexp.MustCompile(`switch requested: (\S+)`).FindStringSubmatch(screen)
	if err == nil || m == nil || !strings.Contains(screen, "is queued and goes on") {
		t.Fatalf("switch answered y with --wait and no kvlive running: %v\n%s", err, screen)
	}
	batches := rollout.Batches(events.Policy{BatchSize: "50%"}, len(want))
	if !strings.Contains(screen, fmt.Sprintf("in %d batches of VMs that move", len(batches))) {
		t.Errorf("the switch did not show its batches %v:\n%s", batches, screen)
	}
	e.runKvlive("all stages")
	watched := e.kvliveCommand(rolloutTimeout, "rollout", "status", m[1], "--watch", "--timeout", rolloutTimeout.String(), "--nats-url", e.natsURL)
	if !strings.Contains(watched, fmt.Sprintf("%d/%d settled · complete", len(want), len(want))) {
		t.Errorf("rollout status --watch did not follow the switch to its end:\n%s", watched)
	}
	e.checkRollout(e.follow(m[1]), rolloutWant{eventID: m[1], shapes: want, action: vmShape.expected, clean: true})
	if rec := e.waitPlanned(m[1]); !slices.Equal(rec.Batches, batches) {
		t.Errorf("the switch rolled out in batches %v, want %v (its --batch-size)", rec.Batches, batches)
	}
}

// kubeconfigIn writes the test's kubeconfig with its context's namespace
// set to ns, as `kubectl config set-context --current --namespace` would.
func (e *env) kubeconfigIn(ns string) string {
	e.t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(e.t.TempDir(), "kubeconfig-"+ns)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// kvliveOnTerminal runs a kvlive command on a pseudo-terminal cols wide,
// answers its [y/N] question with answer, and returns everything the
// terminal showed (standard output and error, the echoed answer).
func (e *env) kvliveOnTerminal(answer string, cols uint16, args ...string) (string, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvliveBin, args...)
	cmd.Env = kvliveEnv()
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: cols, Rows: 50})
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = tty.Close() }()
	var (
		mu     sync.Mutex
		screen bytes.Buffer
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil { // EIO once the command has exited
				return
			}
		}
	}()
	shown := func() string { mu.Lock(); defer mu.Unlock(); return screen.String() }
	e.waitFor("kvlive's question", time.Minute, func() (bool, string) {
		s := shown()
		return strings.Contains(s, "[y/N]"), s
	})
	if _, err := io.WriteString(tty, answer+"\n"); err != nil {
		e.t.Fatal(err)
	}
	err = cmd.Wait()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		e.t.Errorf("the terminal was not drained after kvlive exited")
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		e.t.Fatal(err)
	}
	return shown(), err
}

// TestSwitchPreviewsFromTheRunningKvlive: with kvlive run up, kvlive
// switch shows the plan kvlive plan reads from the cluster, but asks the
// running kvlive for it (kvlive_previews_total counts it served) and
// reads no VM and no revision from the API server (its audit log: no
// list of either by kvlive in the switch's time), then the switch moves
// exactly the VMs it showed.
func TestSwitchPreviewsFromTheRunningKvlive(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 20}})
	proc := e.runKvlive("all stages")
	e.waitGenerations()
	from, to := "clusterinstancetype/"+itMedium, "clusterinstancetype/"+itLarge
	var planned, previewed offline.Report
	vms := e.initialReads("virtualmachines")
	out := e.kvliveCommand(time.Minute, "plan", "--from", from, "--to", to, "-A", "-o", "json", "--kubeconfig", e.kubeconfig)
	if err := json.Unmarshal([]byte(out), &planned); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	if e.initialReads("virtualmachines") == vms {
		t.Fatal("the audit log shows no list of the VMs by kvlive plan: the test cannot tell a read from none")
	}
	vms, revisions := e.initialReads("virtualmachines"), e.initialReads("controllerrevisions")
	out, stderr, err := e.kvliveOnce(time.Minute, "switch", "--from", from, "--to", to, "-A", "--yes", "-o", "json",
		"--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL, "--log-level", "debug")
	if err != nil {
		t.Fatalf("kvlive switch: %v\n%s", err, stderr)
	}
	if err := json.Unmarshal([]byte(out), &previewed); err != nil {
		t.Fatalf("switch -o json: %v\n%s", err, out)
	}
	if n, m := e.initialReads("virtualmachines")-vms, e.initialReads("controllerrevisions")-revisions; n != 0 || m != 0 {
		t.Errorf("kvlive switch listed the VMs %d times and the revisions %d times with kvlive run up; want its preview from kvlive run's cache\n%s", n, m, stderr)
	}
	if !strings.Contains(stderr.String(), "previewed from a running kvlive's cache") {
		t.Errorf("kvlive switch did not say it previewed from kvlive run:\n%s", stderr)
	}
	if !strings.Contains(e.metricsOf(proc), `kvlive_previews_total{result="served"} 1`+"\n") {
		t.Errorf("kvlive run did not count one preview served")
	}
	if got, want := actions(previewed), actions(planned); len(want) == 0 || !maps.Equal(got, want) {
		t.Errorf("the switch previewed %v; kvlive plan says %v", got, want)
	}
	m := regexp.MustCompile(`switch requested: (\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("kvlive switch printed no event id:\n%s", stderr)
	}
	moved := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(m[1]), rolloutWant{eventID: m[1], shapes: moved, action: vmShape.expected, clean: true})
}

// actions is each VM's planned action in a report.
func actions(r offline.Report) map[string]events.Result {
	out := map[string]events.Result{}
	for _, vm := range r.VMs {
		out[vm.Namespace+"/"+vm.Name] = vm.Action
	}
	return out
}

// initialReads counts kvlive's reads of every object of resource the API
// server has logged: lists, and watches that start with the objects there
// are (a streamed list). An informer's later watches, resumed from where
// it was, are not counted: a running kvlive's informers make those.
func (e *env) initialReads(resource string) int {
	e.t.Helper()
	n := len(e.kvliveRequests("list", resource))
	for _, ev := range e.auditStage("ResponseStarted", "watch", resource) {
		if strings.HasPrefix(ev.UserAgent, kvliveUserAgent) && strings.Contains(ev.RequestURI, "sendInitialEvents=true") {
			n++
		}
	}
	return n
}
