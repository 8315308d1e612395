//go:build integration && bench

package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// userHZ is the unit of /proc/PID/stat's CPU times: USER_HZ, 100 on every
// Linux architecture Go runs on.
const userHZ = 100

// cpuUse is the CPU time (user + system) processes used, by what they are.
type cpuUse map[string]time.Duration

// The processes a rollout's CPU goes to. The test binary runs the
// virt-controller stand-in and the raw loop; the kvlive CLI processes it
// started and waited for (kvlive switch) are its reaped children.
const (
	cpuKvlive    = "kvlive run"
	cpuCLI       = "kvlive switch (CLI)"
	cpuAPIServer = "kube-apiserver"
	cpuEtcd      = "etcd"
	cpuNATS      = "nats-server"
	cpuTest      = "stand-in and loop"
)

var cpuOrder = []string{cpuKvlive, cpuCLI, cpuAPIServer, cpuEtcd, cpuNATS, cpuTest}

// readCPU reads every process's CPU time so far from /proc. A process
// that ended since the last read is missing from the difference, unless the
// test binary waited for it.
func readCPU(t *testing.T) cpuUse {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	self := strconv.Itoa(os.Getpid())
	use := cpuUse{}
	for _, d := range entries {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17)
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		comm, f := s[open+1:end], strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		ticks := func(i int) time.Duration {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			return time.Duration(n) * time.Second / userHZ
		}
		own := ticks(11) + ticks(12)
		switch {
		case d.Name() == self:
			use[cpuTest] += own
			use[cpuCLI] += ticks(13) + ticks(14)
		case comm == "kvlive":
			use[cpuKvlive] += own
		case comm == "kube-apiserver", comm == "etcd", comm == "nats-server":
			use[comm] += own
		}
	}
	return use
}

// since is the CPU used between before and c.
func (c cpuUse) since(before cpuUse) cpuUse {
	d := cpuUse{}
	for k, v := range c {
		d[k] = v - before[k]
	}
	return d
}

// perVM prints the CPU each process used per VM moved, and the total.
func (c cpuUse) perVM(vms int) string {
	var parts []string
	var total time.Duration
	for _, k := range cpuOrder {
		if c[k] <= 0 {
			continue
		}
		total += c[k]
		parts = append(parts, fmt.Sprintf("%s %.2f", k, ms(c[k])/float64(vms)))
	}
	return fmt.Sprintf("%.2f ms (%s)", ms(total)/float64(vms), strings.Join(parts, ", "))
}

// controlPlane is the CPU the API server and etcd used.
func (c cpuUse) controlPlane() time.Duration { return c[cpuAPIServer] + c[cpuEtcd] }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// profileKvlive takes a CPU profile of a kvlive run started with
// --profiling for the given time, in the background; done waits for it and
// logs its top functions. Call done once the measured run is over: go tool
// pprof is a child of this process, and its CPU would count as the kvlive
// CLI's and slow the rollout it profiles.
func (e *env) profileKvlive(p *kvliveProc, what string, d time.Duration) (done func()) {
	e.t.Helper()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", e.metricsAddr(p), int(d.Seconds()))
	var path string
	var err error
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		path, err = fetchProfile(url, what)
	}()
	return func() {
		<-fetched
		if err != nil {
			e.t.Logf("profile of kvlive run (%s): %v", what, err)
			return
		}
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=30", kvliveBin, path).CombinedOutput()
		e.t.Logf("profile of kvlive run during %s (%v), kept in %s:\n%s", what, err, path, out)
	}
}

// heapProfile logs where kvlive run's heap is held, by function, and
// returns the live heap (after a collection) the profile counts.
func (e *env) heapProfile(p *kvliveProc, what string) uint64 {
	e.t.Helper()
	path, err := fetchProfile(fmt.Sprintf("http://%s/debug/pprof/heap?gc=1", e.metricsAddr(p)), "heap "+what)
	if err != nil {
		e.t.Fatalf("heap profile of kvlive run (%s): %v", what, err)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount=40", kvliveBin, path).CombinedOutput()
	e.t.Logf("heap of kvlive run with %s (%v), kept in %s:\n%s", what, err, path, out)
	raw, err := exec.Command("go", "tool", "pprof", "-raw", "-sample_index=inuse_space", path).Output()
	if err != nil {
		e.t.Fatalf("heap profile of kvlive run (%s): %v", what, err)
	}
	return inuse(raw)
}

// inuse sums the in-use bytes of a heap profile pprof -raw printed: each
// sample line reads "alloc_objects alloc_space inuse_objects inuse_space:
// locations".
func inuse(raw []byte) uint64 {
	var total uint64
	inSamples := false
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Samples:"):
			inSamples = true
		case strings.HasPrefix(line, "Locations"):
			return total
		case inSamples && len(f) >= 4 && strings.HasSuffix(f[3], ":"):
			if v, err := strconv.ParseUint(strings.TrimSuffix(f[3], ":"), 10, 64); err == nil {
				total += v
			}
		}
	}
	return total
}

// fetchProfile saves the profile at url in a file of its own that outlives
// the test.
func fetchProfile(url, what string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %s", url, resp.Status)
	}
	f, err := os.CreateTemp("", "kvlive-bench-"+strings.ReplaceAll(what, " ", "-")+"-*.pprof")
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}
