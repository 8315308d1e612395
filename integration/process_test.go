//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"kvlive/internal/testenv"
)

// outputTail is how many lines of a kvlive process's output a failed test shows.
const outputTail = 150

// kvliveProc is a kvlive process the test started.
type kvliveProc struct {
	name   string
	cmd    *exec.Cmd
	out    testenv.LogBuffer
	exited chan struct{}
	// stopped is set when the test ends the process on purpose.
	stopped atomic.Bool
}

// runKvlive starts `kvlive run` against the test's API server and NATS
// server, with client limits high enough that --rate, not --qps, paces a
// rollout. It is killed when the test ends; its output is shown if the
// test failed.
func (e *env) runKvlive(name string, extra ...string) *kvliveProc {
	e.t.Helper()
	args := append([]string{"run", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL,
		"--qps", "1000", "--burst", "2000", "--metrics-addr", "127.0.0.1:0"}, e.natsArgs...)
	return e.startKvlive(name, append(args, extra...))
}

// startKvlive starts the kvlive binary with args, as runKvlive does.
func (e *env) startKvlive(name string, args []string) *kvliveProc {
	e.t.Helper()
	p := &kvliveProc{name: name, cmd: exec.Command(kvliveBin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.Env = append(kvliveEnv(), e.extraEnv...)
	if err := p.cmd.Start(); err != nil {
		e.t.Fatalf("start kvlive (%s): %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	e.t.Cleanup(func() {
		p.kill()
		if e.t.Failed() {
			e.t.Logf("kvlive (%s) %v, last %d lines of output:\n%s", name, args, outputTail, p.out.Tail(outputTail))
		}
	})
	return p
}

// kill ends the process with SIGKILL, as a crash or an OOM kill would, and
// waits until it is gone.
func (p *kvliveProc) kill() {
	p.stopped.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	<-p.exited
}

// checkProcs fails the test if a kvlive process exited on its own.
func (e *env) checkProcs() {
	e.t.Helper()
	e.mu.Lock()
	procs := append([]*kvliveProc(nil), e.procs...)
	e.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.exited:
			if !p.stopped.Load() {
				e.t.Fatalf("kvlive (%s) exited unexpectedly (%v); last lines:\n%s", p.name, p.cmd.ProcessState, p.out.Tail(outputTail))
			}
		default:
		}
	}
}

// kvliveCommand runs a one-shot kvlive command (switch) to completion and
// returns its standard output.
func (e *env) kvliveCommand(timeout time.Duration, args ...string) string {
	e.t.Helper()
	out, stderr, err := e.kvliveOnce(timeout, args...)
	if err != nil {
		e.t.Fatalf("kvlive %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, stderr.Tail(outputTail))
	}
	return out
}

// kvliveFails runs a kvlive command that must fail, and returns its
// standard error.
func (e *env) kvliveFails(timeout time.Duration, args ...string) string {
	e.t.Helper()
	out, stderr, err := e.kvliveOnce(timeout, args...)
	if err == nil {
		e.t.Fatalf("kvlive %s succeeded; want it refused\nstdout:\n%s", strings.Join(args, " "), out)
	}
	return stderr.String()
}

// kvliveOnce runs a one-shot kvlive command to completion.
func (e *env) kvliveOnce(timeout time.Duration, args ...string) (string, *testenv.LogBuffer, error) {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvliveBin, args...)
	cmd.Env = kvliveEnv()
	var stderr testenv.LogBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out), &stderr, err
}

// kvliveEnv is the test's environment without OpenTelemetry settings, so
// a developer's OTEL_* variables never send the tests' spans anywhere.
func kvliveEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// terminate ends the process with SIGTERM, as a rolling update would, and
// waits until it is gone.
func (p *kvliveProc) terminate() {
	p.stopped.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	<-p.exited
}
