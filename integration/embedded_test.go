//go:build integration

package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kvlive/internal/testenv"
)

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

var outcomesTotal = regexp.MustCompile(`(?m)^kvlive_outcomes_total\{result="[a-z-]+"\} (\d+)$`)

// TestEmbeddedStoreMetricsAndShutdown runs `kvlive run` the way a user
// first does: its own embedded NATS server with a file store. It checks
// /healthz, /readyz, /metrics and (with --profiling) /debug/pprof/ during a
// rollout, that SIGTERM stops it cleanly, that while it runs `kvlive
// outcomes --data-dir` reaches its server
// and a second `kvlive run` or `kvlive demo` on the same store is refused,
// naming the holder, and that afterwards `kvlive trace` and `kvlive outcomes` read
// every VM from the store it left.
func TestEmbeddedStoreMetricsAndShutdown(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 16}})
	dir, natsPort, metricsPort := t.TempDir(), freePort(t), freePort(t)
	var out testenv.LogBuffer
	cmd := exec.Command(kvliveBin, "run", "--kubeconfig", e.kubeconfig, "--data-dir", dir,
		"--listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metricsPort), "--profiling")
	cmd.Env, cmd.Stdout, cmd.Stderr = kvliveEnv(), &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("kvlive output:\n%s", out.Tail(outputTail))
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", metricsPort)
	e.waitFor("/readyz", time.Minute, func() (bool, string) {
		code, body, err := httpGet(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, body
	})
	if code, _, err := httpGet(base + "/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("/healthz: %d %v", code, err)
	}
	if code, body, err := httpGet(base + "/debug/pprof/cmdline"); err != nil || code != http.StatusOK || !strings.Contains(body, "--profiling") {
		t.Fatalf("/debug/pprof/cmdline with --profiling: %d %q %v", code, body, err)
	}
	e.js = connect(t, fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	e.waitGenerations()
	_, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	p := e.follow(eventID)
	edited := e.selectShapes(onInstancetype(itMedium))
	if len(p.Outcomes) != len(edited) {
		t.Fatalf("%d outcomes, want %d", len(p.Outcomes), len(edited))
	}
	_, metrics, err := httpGet(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range outcomesTotal.FindAllStringSubmatch(metrics, -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	for _, name := range []string{"kvlive_events_total", "kvlive_plans_total", "kvlive_apply_duration_seconds_bucket", "kvlive_consumer_pending", "kvlive_queue_depth"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if total != len(edited) {
		t.Errorf("kvlive_outcomes_total sums to %d, want %d", total, len(edited))
	}

	// The store is the running process's: read commands reach its server,
	// and a second process that would open the same files is refused.
	live := e.kvliveCommand(time.Minute, "outcomes", "--event", eventID, "--data-dir", dir)
	for _, s := range edited {
		if !strings.Contains(live, " "+s.name+" ") {
			t.Errorf("%s missing from kvlive outcomes read through the running process", s.key())
		}
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	for _, args := range [][]string{
		{"run", "--kubeconfig", e.kubeconfig, "--data-dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--metrics-addr", ""},
		{"demo", "--data-dir", dir, "--vms", "4"},
	} {
		stderr := e.kvliveFails(time.Minute, args...)
		if !strings.Contains(stderr, "store in use by kvlive run (pid") || !strings.Contains(stderr, url) {
			t.Errorf("kvlive %s on a held store said %q, want who holds it and where", args[0], stderr)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kvlive run after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("kvlive run did not stop within a minute of SIGTERM")
	}
	tree := e.kvliveCommand(time.Minute, "trace", eventID, "--data-dir", dir, "--color", "never")
	outcomes := e.kvliveCommand(time.Minute, "outcomes", "--event", eventID, "--data-dir", dir)
	for _, s := range edited {
		if !strings.Contains(tree, "applier.apply "+s.key()) || !strings.Contains(outcomes, " "+s.name+" ") {
			t.Errorf("%s missing from kvlive trace or outcomes on the store", s.key())
		}
	}
}
