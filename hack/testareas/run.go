package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	// ImportPath names the package of a build-output or build-fail event:
	// go test -json reports a package that did not compile through them.
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

// testResult is how one top-level test of an area (or a package) ended.
type testResult struct {
	area, name string
	action     string // pass, fail or skip
	elapsed    time.Duration
}

// result is how one area ended.
type result struct {
	area    *area
	elapsed time.Duration
	// cpu is the CPU time of the area's process tree: the test binary and
	// every server it started and waited for (kube-apiserver, etcd,
	// nats-server, kvlive), as the kernel sums a reaped child's children.
	cpu time.Duration
	// failed: a test failed, the binary exited non-zero, or it timed out.
	failed   bool
	overrun  bool
	tests    []testResult
	exitErr  error
	failures []string // the output of each failed test, and of the binary where it failed outside one
	// packages are the packages' times, as go test -json gives them.
	packages map[string]time.Duration
}

// runAreas runs the areas, at most o.jobs at once, longest budget first,
// and the idle ones beside them (all at once: they mostly wait), printing
// each area's end as it comes.
func runAreas(ctx context.Context, o options, areas []*area, bins map[string]string) []*result {
	order := slices.Clone(areas)
	// The idle areas first: an area waiting for a busy slot must not hold
	// back one that needs none; they never wait for each other.
	slices.SortStableFunc(order, func(a, b *area) int {
		if a.idle != b.idle {
			return map[bool]int{true: -1, false: 1}[a.idle]
		}
		return int(b.budget - a.budget)
	})
	results := make([]*result, len(order))
	var mu sync.Mutex
	busy, idle := make(chan struct{}, o.jobs), make(chan struct{}, len(order))
	var wg sync.WaitGroup
	for i, a := range order {
		sem := busy
		if a.idle {
			sem = idle
		}
		sem <- struct{}{}
		fmt.Printf("testareas: %s (%d tests, budget %s) started\n", a.name, len(a.tests), a.budget)
		wg.Go(func() {
			defer func() { <-sem }()
			r := runArea(ctx, o, a, bins[a.pkg])
			mu.Lock()
			defer mu.Unlock()
			results[i] = r
			report(os.Stdout, r)
		})
	}
	wg.Wait()
	return results
}

// runArea runs one area's tests through test2json, keeping its events in
// o.out/<area>.json.
func runArea(ctx context.Context, o options, a *area, bin string) *result {
	r := &result{area: a}
	if len(a.tests) == 0 {
		return r
	}
	log, err := os.Create(filepath.Join(o.out, a.name+".json"))
	if err != nil {
		r.failed, r.exitErr = true, err
		return r
	}
	defer func() { _ = log.Close() }()
	names := make([]string, len(a.tests))
	for i, t := range a.tests {
		names[i] = regexp.QuoteMeta(t)
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "test2json", "-t", "-p", a.name, bin,
		"-test.v=test2json", "-test.count=1", "-test.timeout="+(2*a.budget).String(),
		"-test.run", "^("+strings.Join(names, "|")+")$")
	cmd.Dir = a.pkg
	// The area runs in a process group of its own, which ends with it: a
	// test binary cut short by its timeout leaves its servers (kube-apiserver,
	// etcd, nats-server, kvlive) running, and the next areas would share
	// the cores with them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.failed, r.exitErr = true, err
		return r
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.failed, r.exitErr = true, err
		return r
	}
	r.read(io.TeeReader(stdout, log))
	r.exitErr = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	r.elapsed = time.Since(start)
	if ps := cmd.ProcessState; ps != nil {
		r.cpu = ps.UserTime() + ps.SystemTime()
	}
	r.failed = r.failed || r.exitErr != nil
	r.overrun = r.elapsed > a.budget
	return r
}

// read follows an area's events, keeping each top-level test's end and the
// output of the tests that failed.
func (r *result) read(in io.Reader) {
	outputs := map[string]*strings.Builder{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not an event: something printed outside the test framework.
			outputs[""] = appendTo(outputs[""], sc.Text()+"\n")
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		key := e.Package + " " + top
		switch e.Action {
		case "build-output":
			outputs["build "+e.ImportPath] = appendTo(outputs["build "+e.ImportPath], e.Output)
		case "build-fail":
			r.failed = true
			if out := outputs["build "+e.ImportPath]; out != nil {
				r.failures = append(r.failures, out.String())
			}
			delete(outputs, "build "+e.ImportPath)
		case "output":
			outputs[key] = appendTo(outputs[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				if r.packages == nil {
					r.packages = map[string]time.Duration{}
				}
				r.packages[e.Package] = seconds(e.Elapsed)
				// A package's end: its output outside any test matters
				// only where it failed.
				if e.Action == "fail" {
					r.failed = true
					if out := outputs[key]; out != nil {
						r.failures = append(r.failures, out.String())
					}
				}
				delete(outputs, key)
				continue
			}
			if e.Test != top {
				continue
			}
			r.tests = append(r.tests, testResult{area: e.Package, name: top, action: e.Action, elapsed: seconds(e.Elapsed)})
			if e.Action == "fail" {
				r.failed = true
				r.failures = append(r.failures, outputs[key].String())
			}
			delete(outputs, key)
		}
	}
	if r.failed && outputs[""] != nil {
		r.failures = append(r.failures, outputs[""].String())
	}
	// A test still running when the binary ended (a panic, a timeout)
	// failed with whatever it printed.
	for key, out := range outputs {
		if key != "" {
			r.failed = true
			r.failures = append(r.failures, out.String())
		}
	}
}

func appendTo(b *strings.Builder, s string) *strings.Builder {
	if b == nil {
		b = &strings.Builder{}
	}
	b.WriteString(s)
	return b
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Second)
}

// report prints how an area ended, with the output of what failed.
func report(w io.Writer, r *result) {
	verdict := "ok"
	switch {
	case r.failed:
		verdict = "FAIL"
	case r.overrun:
		verdict = "OVER BUDGET"
	}
	fmt.Fprintf(w, "testareas: %s %s: %d tests in %s (budget %s), %s of CPU\n", verdict, r.area.name, len(r.tests), r.elapsed.Round(time.Second), r.area.budget, r.cpu.Round(time.Second))
	for _, out := range r.failures {
		fmt.Fprint(w, out)
	}
	if r.exitErr != nil {
		fmt.Fprintf(w, "testareas: %s: %v\n", r.area.name, r.exitErr)
	}
}

// reportFile reads go test -json events from a file ("-": stdin), as
// hack/test.sh keeps the unit tests', and prints what failed, the slowest
// packages and the slowest tests; it fails when a test or package failed.
func reportFile(w io.Writer, path string, slowest int) error {
	in := os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		in = f
	}
	r := &result{area: &area{name: path}}
	r.read(in)
	for _, out := range r.failures {
		fmt.Fprint(w, out)
	}
	type pkgTime struct {
		name    string
		elapsed time.Duration
	}
	var pkgs []pkgTime
	for name, d := range r.packages {
		pkgs = append(pkgs, pkgTime{name, d})
	}
	slices.SortFunc(pkgs, func(a, b pkgTime) int { return int(b.elapsed - a.elapsed) })
	fmt.Fprintf(w, "slowest packages:\n")
	for _, p := range pkgs[:min(slowest, len(pkgs))] {
		fmt.Fprintf(w, "%8s  %s\n", p.elapsed, p.name)
	}
	printSlowest(w, r.tests, slowest)
	if r.failed {
		return fmt.Errorf("%s: tests failed", path)
	}
	return nil
}

// printSlowest lists the slowest of tests.
func printSlowest(w io.Writer, tests []testResult, n int) {
	tests = slices.Clone(tests)
	slices.SortFunc(tests, func(a, b testResult) int { return int(b.elapsed - a.elapsed) })
	fmt.Fprintf(w, "slowest tests:\n")
	for _, t := range tests[:min(n, len(tests))] {
		fmt.Fprintf(w, "%8s  %-5s %-22s %s\n", t.elapsed, t.action, t.area, t.name)
	}
}

// summarize prints every area's time against its budget and the slowest
// tests, and fails naming each area that failed or ran past its budget.
func summarize(w io.Writer, o options, results []*result, wall time.Duration) error {
	fmt.Fprintf(w, "\n%-14s %-12s %8s %8s %8s %6s %6s\n", "area", "result", "time", "budget", "cpu", "cores", "tests")
	var all []testResult
	var bad []string
	for _, r := range results {
		verdict := "ok"
		switch {
		case r.failed:
			verdict = "FAIL"
			bad = append(bad, r.area.name+" failed")
		case r.overrun:
			verdict = "over budget"
			bad = append(bad, fmt.Sprintf("%s took %s, past its budget of %s", r.area.name, r.elapsed.Round(time.Second), r.area.budget))
		}
		name := r.area.name
		if r.area.idle {
			name += " (idle)"
		}
		cores := 0.0
		if r.elapsed > 0 {
			cores = r.cpu.Seconds() / r.elapsed.Seconds()
		}
		fmt.Fprintf(w, "%-14s %-12s %8s %8s %8s %6.2f %6d\n", name, verdict, r.elapsed.Round(time.Second), r.area.budget, r.cpu.Round(time.Second), cores, len(r.tests))
		all = append(all, r.tests...)
	}
	fmt.Fprintf(w, "%d areas, %d at once (and the idle ones beside them), in %s; events in %s\n", len(results), o.jobs, wall.Round(time.Second), o.out)
	printSlowest(w, all, o.slowest)
	if len(bad) > 0 {
		return fmt.Errorf("integration areas: %s", strings.Join(bad, "; "))
	}
	return nil
}
