//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
