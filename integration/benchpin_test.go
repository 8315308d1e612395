//go:build integration && bench

package integration

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The deployed shape: the API server and etcd on cores of their own, kvlive
// and NATS (and the raw loop) elsewhere. On two cores, one each; on a
// machine with more, name the sets (a list of CPUs and ranges, as taskset
// -c takes them), e.g. -bench.control-plane-cpus 0-3 -bench.client-cpus 4-7.
// Empty sets leave every process where the OS puts it: the shared-core
// shape.
var (
	benchControlPlaneCPUs = flag.String("bench.control-plane-cpus", "0", "CPUs kube-apiserver and etcd are pinned to in the stopped section (empty: not pinned)")
	benchClientCPUs       = flag.String("bench.client-cpus", "1", "CPUs everything else (the test binary and its children: kvlive, the raw loop, nats-server) is pinned to in the stopped section (empty: not pinned)")
)

// The processes the control plane is.
var controlPlaneComms = []string{"kube-apiserver", "etcd"}

// shape names the CPU placement the section ran in, for the table.
func shape() string {
	if *benchControlPlaneCPUs == "" || *benchClientCPUs == "" {
		return "shared cores"
	}
	return fmt.Sprintf("control plane on CPU %s, clients on CPU %s", *benchControlPlaneCPUs, *benchClientCPUs)
}

// pinDeployedShape pins every thread of kube-apiserver and etcd to the
// control plane's CPUs, and every thread of this process and of
// nats-server to the clients' (processes started later inherit it: kvlive
// run, kvlive switch, go tool pprof), as taskset -a -p would; the test's
// cleanup gives every process all CPUs back. A thread started later
// inherits the mask of the thread that started it, so one pass holds.
func pinDeployedShape(t *testing.T) {
	t.Helper()
	if *benchControlPlaneCPUs == "" || *benchClientCPUs == "" {
		return
	}
	control, err := cpuSet(*benchControlPlaneCPUs)
	if err != nil {
		t.Fatalf("-bench.control-plane-cpus: %v", err)
	}
	clients, err := cpuSet(*benchClientCPUs)
	if err != nil {
		t.Fatalf("-bench.client-cpus: %v", err)
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatalf("the test's CPUs: %v", err)
	}
	for _, set := range []unix.CPUSet{control, clients} {
		for cpu := range 1024 {
			if set.IsSet(cpu) && !all.IsSet(cpu) {
				t.Fatalf("CPU %d is not this machine's (it has %d)", cpu, all.Count())
			}
		}
	}
	placed := map[string]int{}
	self := strconv.Itoa(os.Getpid())
	for pid, comm := range processes(t) {
		set := clients
		switch {
		case slices.Contains(controlPlaneComms, comm):
			set = control
		case pid == self, comm == "nats-server", comm == "kvlive":
		default:
			continue
		}
		if err := setAffinity(pid, &set); err != nil {
			t.Fatalf("pin %s (%s): %v", comm, pid, err)
		}
		placed[comm]++
	}
	for _, comm := range controlPlaneComms {
		if placed[comm] == 0 {
			t.Fatalf("no %s process to pin", comm)
		}
	}
	t.Logf("pinned: %s (%v)", shape(), placed)
	t.Cleanup(func() {
		for pid, comm := range processes(t) {
			if slices.Contains(controlPlaneComms, comm) || pid == self || comm == "nats-server" || comm == "kvlive" {
				if err := setAffinity(pid, &all); err != nil {
					t.Logf("unpin %s (%s): %v", comm, pid, err)
				}
			}
		}
	})
}

// processes maps the pid of every process to its command name.
func processes(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	out := map[string]string{}
	for _, d := range entries {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm")); err == nil {
			out[d.Name()] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// setAffinity sets the CPU mask of every thread of pid.
func setAffinity(pid string, set *unix.CPUSet) error {
	tasks, err := os.ReadDir(filepath.Join("/proc", pid, "task"))
	if err != nil {
		return err
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}

// cpuSet parses a CPU list as taskset -c takes it: "0", "0,2", "0-3,6".
func cpuSet(list string) (unix.CPUSet, error) {
	var set unix.CPUSet
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if errA != nil || errB != nil || a < 0 || b < a || b >= 1024 {
			return set, fmt.Errorf("%q is not a CPU list (e.g. 0 or 0-3,6)", list)
		}
		for cpu := a; cpu <= b; cpu++ {
			set.Set(cpu)
		}
	}
	return set, nil
}
