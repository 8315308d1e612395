//go:build integration && bench

package integration

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvlive/internal/kube"
)

var (
	benchStoppedVMs  = flag.String("bench.stopped", "1000,10000", "fleet sizes (comma separated) of the stopped section")
	benchStoppedRuns = flag.Int("bench.runs", 2, "runs of each move per fleet size in the stopped section (the spread is reported)")
)

// stoppedRetention is the revision retention of the stopped section's
// kvlive: what its two runs supersede is kept, so no pruning needs
// waiting out between timed moves (pruning is not what it times).
const stoppedRetention = 2

// rawLoopWorkers is the raw loop's concurrency in the stopped section; it
// has no client-side limit: the API server is its only one.
const rawLoopWorkers = 16

// benchStopped is the section "stopped VMs, nothing reacting": fleets of
// stopped VMs pinned once by the stand-in, which is then stopped, so the
// API server serves only the moves. Each run, kvlive run at its defaults
// re-pins the fleet (edit to last outcome) and switches it (kvlive switch
// starting to last outcome), then a raw client-go loop of 16 workers with
// no client-side limit makes the same writes (the revision and the pin's
// JSON patch; the switch's server-side apply). kvlive run is stopped
// while the loop runs, so neither shares the API server with the other.
func benchStopped(t *testing.T, tab *benchTable) {
	for _, n := range sizes(t, *benchStoppedVMs) {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			began := time.Now()
			e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: n}, stopped: true})
			e.stopStandin()
			seeded := time.Since(began)
			on := &fleetOn{itMedium, itLarge}
			var kv, raw [2][]applyRun
			lap := lapClock(t)
			for run := range *benchStoppedRuns {
				// Two superseded revisions kept, not one: with one, from the
				// second run on kvlive's pruner deletes a revision a VM
				// after its re-pin (most of a minute at 10,000 VMs), which
				// the section waits out untimed before the switch.
				proc := e.runKvlive("kvlive defaults", append(benchDefaults.args(), "--profiling", "--revision-retention", strconv.Itoa(stoppedRetention))...)
				e.waitGenerations()
				lap("kvlive run started and synced")
				if run > 0 {
					// The loop's edit, made while kvlive was stopped, is an
					// event kvlive plans when it starts (every VM at the
					// target already: a "none" each); it is not timed, and
					// must not share the NATS server with the timed re-pin.
					e.follow(raw[0][run-1].eventID)
					lap("kvlive planned the loop's edit")
				}
				e.waitQuiet("kvlive's re-pin")
				var profiled func()
				if run == 0 && n == slices.Max(sizes(t, *benchStoppedVMs)) {
					profiled = e.profileKvlive(proc, fmt.Sprintf("the re-pin of %d stopped VMs", n), 5*time.Second)
				}
				kv[0] = append(kv[0], e.stoppedRollout(on, false))
				if profiled != nil {
					profiled()
				}
				lap("kvlive's re-pin")
				kv[1] = append(kv[1], e.stoppedRollout(on, true))
				lap("kvlive's switch")
				if run == *benchStoppedRuns-1 {
					r := rss(t, proc)
					heap := e.heapProfile(proc, fmt.Sprintf("%d stopped VMs cached", n))
					tab.add("memory", fmt.Sprintf("kvlive run RSS, %d stopped VMs cached, after its 2 rollouts", n),
						fmt.Sprintf("%s (live heap %s, %.1f KiB per VM)", mib(r), mib(heap), float64(heap)/float64(n)/1024), "aim < 120 MiB at 20,000: -bench.sections memory -bench.memory-stopped 20000")
				}
				proc.terminate()
				lap("kvlive run's figures read and stopped")
				raw[1] = append(raw[1], e.stoppedRawLoop(on, true))
				lap("the loop's switch")
				raw[0] = append(raw[0], e.stoppedRawLoop(on, false))
				lap("the loop's re-pin")
				if run < *benchStoppedRuns-1 {
					// The loop prunes nothing; what it superseded is pruned
					// here, untimed, not by the next kvlive run's pruner
					// while its rollout is timed. With stoppedRetention, two
					// runs leave kvlive's own pruner nothing to delete.
					e.kvliveCommand(10*time.Minute, "revisions", "prune", "-A", "--revision-retention", strconv.Itoa(stoppedRetention), "--kubeconfig", e.kubeconfig)
					lap("kvlive revisions prune")
				}
			}
			tab.add("time", fmt.Sprintf("the stopped section at %d VMs", n), fmt.Sprintf("%v: fleet seeded and pinned in %v, %d runs in %v",
				time.Since(began).Round(time.Second), seeded.Round(time.Second), len(kv[0]), (time.Since(began)-seeded).Round(time.Second)), "")
			for i, move := range []string{"re-pin", "switch"} {
				what := fmt.Sprintf("%s %d stopped VMs, nothing reacting, %s --revision-retention %d (%d runs)", move, n, benchDefaults, stoppedRetention, len(kv[i]))
				k, r := rates(kv[i]), rates(raw[i])
				ratio := median(k) / median(r)
				tab.aim("stopped", what, fmt.Sprintf("kvlive %s VMs/s, raw loop %s VMs/s: %.2f× raw (medians)", spread(k), spread(r), ratio), "≥ 0.9× raw", ratio >= 0.9)
				runs := n * len(kv[i]) // the rows below are per VM, over all runs
				tab.add("api", what, "kvlive "+sumOf(kv[i], func(r applyRun) apiUse { return r.api }).perVM(runs), "")
				tab.add("api", what, "raw loop "+sumOf(raw[i], func(r applyRun) apiUse { return r.api }).perVM(runs), "")
				tab.add("nats", what, "kvlive "+sumOf(kv[i], func(r applyRun) apiUse { return r.nats }).perVM(runs), "")
				tab.add("cpu", what, "kvlive "+sumOf(kv[i], func(r applyRun) cpuUse { return r.cpu }).perVM(runs), "")
				tab.add("cpu", what, "raw loop "+sumOf(raw[i], func(r applyRun) cpuUse { return r.cpu }).perVM(runs), "")
			}
		})
	}
}

// lapClock returns a function that logs how long the section spent since
// its last call, on what: where a section's time goes.
func lapClock(t *testing.T) func(what string) {
	last := time.Now()
	return func(what string) {
		t.Logf("%v: %s", time.Since(last).Round(100*time.Millisecond), what)
		last = time.Now()
	}
}

// stoppedRollout is one kvlive rollout on the stopped fleet: an edit of
// its instance type (re-pin) or kvlive switch to the other (switch), timed
// from the edit or the command's start to the last outcome.
func (e *env) stoppedRollout(on *fleetOn, swtch bool) applyRun {
	e.t.Helper()
	e.waitQuiet("kvlive's rollout")
	before, apiBefore, natsBefore := readCPU(e.t), e.readAPI(), e.readNATS()
	start := time.Now()
	var id string
	if swtch {
		args := append([]string{"switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A", "--yes",
			"--from", "clusterinstancetype/" + on.it, "--to", "clusterinstancetype/" + on.other}, e.natsArgs...)
		m := switchRequested.FindStringSubmatch(e.kvliveCommand(5*time.Minute, args...))
		if m == nil {
			e.t.Fatal("kvlive switch printed no event id")
		}
		id = m[1]
	} else {
		id = e.benchEdit(on.it)
	}
	p := e.follow(id)
	var first, last time.Time
	wrote := 0
	for _, o := range p.Outcomes {
		if o.Wrote {
			wrote++
		}
		if first.IsZero() || o.FinishedAt.Before(first) {
			first = o.FinishedAt
		}
		last = maxTime(last, o.FinishedAt)
	}
	if wrote != len(p.Outcomes) || wrote == 0 {
		e.t.Fatalf("rollout %s: %d of %d outcomes wrote", id, wrote, len(p.Outcomes))
	}
	cpu, api, msgs := readCPU(e.t).since(before), e.readAPI().since(apiBefore), e.readNATS().since(natsBefore)
	e.t.Logf("%s: start → first outcome %v, → last %v (%.0f VMs/s)", id, first.Sub(start), last.Sub(start), float64(wrote)/last.Sub(start).Seconds())
	if swtch {
		on.swap()
		e.waitReferencing(on.it)
	} else {
		e.waitPinnedTo(on.it)
	}
	return applyRun{rate: float64(wrote) / last.Sub(start).Seconds(), cpu: cpu, api: api, nats: msgs, eventID: id}
}

// stoppedRawLoop makes the same writes as kvlive from rawLoopWorkers
// goroutines on a client without a client-side limit: a re-pin after an
// edit of the instance type (the edit not timed; its event id, which kvlive
// plans when it next starts, is the run's eventID), or a switch to the other.
func (e *env) stoppedRawLoop(on *fleetOn, swtch bool) applyRun {
	e.t.Helper()
	var edit string
	if !swtch {
		edit = e.benchEdit(on.it)
	}
	target := e.instancetype(on.it)
	if swtch {
		target = e.instancetype(on.other)
	}
	vms := e.benchVMsOn(on.it)
	cfg, err := clientConfig(e.kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.QPS = -1 // no client-side limit
	clients, err := kube.NewClients(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitQuiet("the raw loop")
	before, apiBefore := readCPU(e.t), e.readAPI()
	_, took := e.rawWrites(clients, vms, target, swtch, rawLoopWorkers)
	cpu, api := readCPU(e.t).since(before), e.readAPI().since(apiBefore)
	e.t.Logf("raw loop: %d VMs in %v (%.0f VMs/s)", len(vms), took, float64(len(vms))/took.Seconds())
	if swtch {
		on.swap()
		e.waitReferencing(on.it)
	} else {
		e.waitPinnedTo(on.it)
	}
	return applyRun{rate: float64(len(vms)) / took.Seconds(), cpu: cpu, api: api, eventID: edit}
}

// waitReferencing waits until every benched VM's spec references it
// (nothing moves the status pins after a switch in this section).
func (e *env) waitReferencing(it string) {
	e.t.Helper()
	e.waitFor("every benched VM referencing "+it, settleTimeout, func() (bool, string) {
		left := 0
		for _, vm := range e.fleetView().vms {
			if vm.Spec.Instancetype != nil && vm.Spec.Instancetype.Name != itSmall && vm.Spec.Instancetype.Name != it {
				left++
			}
		}
		return left == 0, plural(left, "VM") + " not referencing " + it
	})
}

// sumOf adds up one use of every run.
func sumOf[M ~map[K]V, K comparable, V float64 | time.Duration](runs []applyRun, use func(applyRun) M) M {
	total := M{}
	for _, r := range runs {
		for k, v := range use(r) {
			total[k] += v
		}
	}
	return total
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func rates(runs []applyRun) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = r.rate
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread prints the smallest and largest of v, or the one value.
func spread(v []float64) string {
	lo, hi := slices.Min(v), slices.Max(v)
	if len(v) == 1 || fmt.Sprintf("%.0f", lo) == fmt.Sprintf("%.0f", hi) {
		return fmt.Sprintf("%.0f", lo)
	}
	return strings.Join([]string{fmt.Sprintf("%.0f", lo), fmt.Sprintf("%.0f", hi)}, "–")
}
