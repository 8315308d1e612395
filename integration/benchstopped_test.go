//go:build integration && bench

package integration

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/pruner"
	"kvlive/rollout"
)

var (
	benchStoppedVMs  = flag.String("bench.stopped", "1000,10000", "fleet sizes (comma separated) of the stopped section; -bench.stopped 100000 -bench.runs 1 for the large fleet's memory (about an hour)")
	benchStoppedRuns = flag.String("bench.runs", "2,1", "runs of each move per fleet size in the stopped section (comma separated, one per size of -bench.stopped, the last for any more; the spread is reported)")
	benchRawFirst    = flag.Bool("bench.raw-first", false, "in the stopped section's first run, the raw loop's moves go before kvlive's (the order alternates from run to run)")
)

// stoppedRetention is the revision retention of the stopped section's
// kvlive, its default: what a move supersedes beyond it kvlive's pruner
// deletes once the move is over, which the section waits out, untimed
// (waitSettledDown), before the next move. With 2, kept so that no
// pruning needed waiting out, the revisions of four rollouts over two
// instance types held a third of kvlive's live heap at 10,000 VMs.
const stoppedRetention = pruner.DefaultRetention

// stoppedObserveTimeout is the verdict deadline of the stopped section's
// kvlive. On a cluster, virt-controller re-pins a switched VM, stopped or
// not, as soon as it sees the switch, and its verdict is stored then; here
// nothing reacts, so each switched VM's verdict waits out the deadline. At
// the default two minutes, those of one run's switch came due during a
// later run's timed moves (a thousand verdicts stored on the clients' core
// in the middle of another rollout: the switch's rate fell by a quarter
// from the second run on) and sat in the idle kvlive's heap when its
// memory was read. Five seconds puts them where a reacting cluster does:
// during the switch, a few seconds behind each VM's move, the last ones
// waited out (waitSettledDown) before the next move.
const stoppedObserveTimeout = 5 * time.Second

// rawLoopWorkers is the raw loop's concurrency in the stopped section; it
// has no client-side limit: the API server is its only one.
const rawLoopWorkers = 16

// benchStopped is the section "stopped VMs, nothing reacting": fleets of
// stopped VMs pinned once by the stand-in, which is then stopped, so the
// API server serves only the moves, in the deployed shape: the API
// server and etcd on a core of their own (pinDeployedShape). Each run,
// kvlive run at its defaults re-pins the fleet (edit to last outcome) and
// switches it (kvlive switch starting to last outcome), and a raw
// client-go loop of 16 workers with no client-side limit makes the same
// writes (the revision and the pin's JSON patch; the switch's server-side
// apply) while it watches the fleet as kvlive does (watchFleet); the two
// go first by turns. kvlive run is stopped while the loop runs, so
// neither shares the API server with the other.
func benchStopped(t *testing.T, tab *benchTable) {
	for _, n := range sizes(t, *benchStoppedVMs) {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			began := time.Now()
			e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: n}, stopped: true})
			e.stopStandin()
			// The bench's own reading of a rollout's outcomes, on the
			// clients' core, is not kvlive's cost: read them once.
			e.followTimeout = movedWithin(n)
			e.followSlice = e.followTimeout
			seeded := time.Since(began)
			pinDeployedShape(t)
			on := &fleetOn{itMedium, itLarge}
			var kv, raw [2][]applyRun
			lap := lapClock(t)
			runs := runsAt(t, n)
			// pendingEdit is the loop's last edit, an event kvlive plans
			// when it next starts (every VM at the target already: a
			// "none" each); it is not timed, and must not share the NATS
			// server with the timed re-pin.
			pendingEdit := ""
			// The first run at the largest size is profiled.
			profiled := func(run int) bool { return run == 0 && n == slices.Max(sizes(t, *benchStoppedVMs)) }
			kvliveMoves := func(run int, first, last bool) {
				proc := e.runKvlive("kvlive defaults", append(benchDefaults.args(), "--profiling", "--revision-retention", strconv.Itoa(stoppedRetention),
					"--observe-timeout", stoppedObserveTimeout.String())...)
				e.waitReady(proc, syncedWithin(n))
				e.waitGenerations()
				lap("kvlive run started and synced")
				if pendingEdit != "" {
					e.follow(pendingEdit)
					pendingEdit = ""
					lap("kvlive planned the loop's edit")
				}
				e.waitQuiet("kvlive's re-pin")
				profile := profiled(run)
				inTurn(first, func() {
					done := func() {}
					if profile {
						done = e.profileKvlive(proc, fmt.Sprintf("the re-pin of %d stopped VMs", n), 5*time.Second)
					}
					kv[0] = append(kv[0], e.stoppedRollout(on, false, profile))
					done()
					lap("kvlive's re-pin")
					e.waitSettledDown(proc, n)
					lap("kvlive's verdicts on its re-pin stored, its revisions pruned")
				}, func() {
					kv[1] = append(kv[1], e.stoppedRollout(on, true, profile))
					lap("kvlive's switch")
					e.waitSettledDown(proc, n)
					lap("kvlive's verdicts on its switch stored, its revisions pruned")
				})
				if last {
					// Idle is also its keeper done with the two rollouts:
					// it reads a rollout's outcomes once, to mark it
					// settled, a sweep period after its last verdict.
					e.waitMarkedSettled(proc, n, kv[0][len(kv[0])-1].eventID, kv[1][len(kv[1])-1].eventID)
					lap("kvlive's keeper marked its rollouts settled")
					// kvlive run counts as moving for 2 s after its last
					// plan and looks every second; then it collects at its
					// idle target and hands the rollout's garbage back. Its
					// verdicts are stored and its revisions pruned by now
					// (waitSettledDown): idle.
					time.Sleep(idleAfterRollout)
					e.logRevisions()
					r := rss(t, proc)
					e.logGoMemory(proc)
					heap := e.heapProfile(proc, fmt.Sprintf("%d stopped VMs cached", n))
					aim, limit := stoppedRSSAim(n)
					tab.aim("memory", fmt.Sprintf("kvlive run RSS, %d stopped VMs cached, idle after its %d rollouts", n, 2*runs),
						fmt.Sprintf("%s (live heap %s, %.1f KiB per VM)", mib(r), mib(heap), float64(heap)/float64(n)/1024), aim, r < limit)
				}
				proc.terminate()
				lap("kvlive run's figures read and stopped")
			}
			rawMoves := func(run int, first, last bool) {
				inTurn(first, func() {
					raw[0] = append(raw[0], e.stoppedRawLoop(on, false, profiled(run)))
					pendingEdit = raw[0][len(raw[0])-1].eventID
					lap("the loop's re-pin")
				}, func() {
					raw[1] = append(raw[1], e.stoppedRawLoop(on, true, profiled(run)))
					lap("the loop's switch")
				})
				if !last {
					// The loop prunes nothing; what it superseded is pruned
					// here, untimed, not by the next kvlive run's pruner
					// while its rollout is timed. With stoppedRetention,
					// kvlive's own pruner is left nothing to delete.
					e.kvliveCommand(10*time.Minute, "revisions", "prune", "-A", "--revision-retention", strconv.Itoa(stoppedRetention), "--kubeconfig", e.kubeconfig)
					lap("kvlive revisions prune")
				}
			}
			for run := range runs {
				// Whichever goes second meets the API server after the
				// first's work (its heap, its watch cache); the order
				// alternates from run to run, so an even number of runs
				// has each go first as often.
				final := run == runs-1
				if rawFirst := *benchRawFirst != (run%2 == 1); rawFirst {
					rawMoves(run, true, false)
					kvliveMoves(run, false, final)
				} else {
					kvliveMoves(run, true, final)
					rawMoves(run, false, final)
				}
			}
			tab.add("time", fmt.Sprintf("the stopped section at %d VMs", n), fmt.Sprintf("%v: fleet seeded and pinned in %v, %d runs in %v",
				time.Since(began).Round(time.Second), seeded.Round(time.Second), len(kv[0]), (time.Since(began)-seeded).Round(time.Second)), "")
			for i, move := range []string{"re-pin", "switch"} {
				what := fmt.Sprintf("%s %d stopped VMs, nothing reacting, %s --revision-retention %d (%d runs)", move, n, benchDefaults, stoppedRetention, len(kv[i]))
				k, r := rates(kv[i]), rates(raw[i])
				ratio := median(k) / median(r)
				tab.aim("stopped", what, fmt.Sprintf("kvlive %s VMs/s (its first outcome %s s after the start), raw loop %s VMs/s: %.2f× raw (medians%s), %s",
					spread("%.0f", k), spread("%.2f", starts(kv[i])), spread("%.0f", r), ratio, ownRatios(k, r), shape()), "≥ 0.95× raw", ratio >= 0.95)
				runs := n * len(kv[i]) // the rows below are per VM, over all runs
				kc, rc := sumOf(kv[i], func(r applyRun) cpuUse { return r.cpu }).controlPlane(), sumOf(raw[i], func(r applyRun) cpuUse { return r.cpu }).controlPlane()
				cost := float64(kc) / float64(rc)
				tab.aim("control plane", what, fmt.Sprintf("kube-apiserver and etcd CPU a VM: kvlive %.2f ms, raw loop %.2f ms: %.2f× raw", ms(kc)/float64(runs), ms(rc)/float64(runs), cost), "≤ 1.05× raw", cost <= 1.05)
				tab.add("api", what, "kvlive "+sumOf(kv[i], func(r applyRun) apiUse { return r.api }).perVM(runs), "")
				tab.add("api", what, "raw loop "+sumOf(raw[i], func(r applyRun) apiUse { return r.api }).perVM(runs), "")
				tab.add("nats", what, "kvlive "+sumOf(kv[i], func(r applyRun) apiUse { return r.nats }).perVM(runs), "")
				tab.add("cpu", what, "kvlive "+sumOf(kv[i], func(r applyRun) cpuUse { return r.cpu }).perVM(runs), "")
				tab.add("cpu", what, "raw loop "+sumOf(raw[i], func(r applyRun) cpuUse { return r.cpu }).perVM(runs), "")
			}
		})
	}
}

// waitSettledDown waits, up to settledWithin, until kvlive run p has
// nothing left of its last move of n VMs (what it counts as settling): it
// awaits no verdict (kvlive_verdicts_awaited 0), every VM it moved having
// KubeVirt's verdict stored, and its revision pruner has no VM left to
// look at. So the next move does not pay for the last one's, and an idle
// kvlive is read idle.
func (e *env) waitSettledDown(p *kvliveProc, n int) {
	e.t.Helper()
	within := settledWithin(n)
	e.waitFor("kvlive run to settle down after its move", within, func() (bool, string) {
		m := e.metricsOf(p)
		return strings.Contains(m, "\nkvlive_verdicts_awaited 0\n") && strings.Contains(m, "\n"+prunerBacklogDrained),
			fmt.Sprintf("verdict deadline %v: %s; %s", stoppedObserveTimeout, metricLines(m, "kvlive_verdicts_awaited"), metricLines(m, "kvlive_queue_depth"))
	})
}

// waitMarkedSettled waits until kvlive run p's records keeper has marked
// the rollouts of ids settled and leaves none open
// (kvlive_rollouts_open 0): a sweep period (a minute at the default
// horizon) after each one's last verdict, at the sweep after that.
func (e *env) waitMarkedSettled(p *kvliveProc, n int, ids ...string) {
	e.t.Helper()
	e.waitFor("kvlive run's keeper to mark its rollouts settled", settledWithin(n)+2*rollout.KeepEvery(events.DefaultStreamOptions().MaxAge), func() (bool, string) {
		m := e.metricsOf(p)
		var waiting []string
		for _, id := range ids {
			if !loggedSettled(p, id) {
				waiting = append(waiting, id)
			}
		}
		return len(waiting) == 0 && strings.Contains(m, "\nkvlive_rollouts_open 0\n"),
			fmt.Sprintf("not marked: %v; %s", waiting, metricLines(m, "kvlive_rollouts_open"))
	})
}

// waitReady waits, up to within, until kvlive run p answers /readyz
// with 200 (its caches synced, NATS reachable, every change it saw
// published), as a readiness probe would. The watcher's generations
// bucket, which an earlier kvlive run filled on the same NATS server,
// says nothing of a run started later: a timed move must not begin while
// this one still lists the fleet.
func (e *env) waitReady(p *kvliveProc, within time.Duration) {
	e.t.Helper()
	e.waitFor("kvlive run to be ready", within, func() (bool, string) {
		addr, ok := servingAddr(p)
		if !ok {
			return false, "it has not said where it serves /readyz yet"
		}
		code, body, err := httpGet("http://" + addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, body
	})
}

// syncedWithin bounds how long kvlive run takes to list a fleet of n
// stopped VMs and their revisions: a minute for each 10,000.
func syncedWithin(n int) time.Duration {
	return time.Duration(max(1, (n+9999)/10000)) * time.Minute
}

// movedWithin bounds one move of n stopped VMs, edit or command to last
// outcome: rolloutTimeout, or 50 VMs a second (a third of the rates
// measured at 10,000), whichever is longer: the 100,000-VM re-pin had
// 35,554 outcomes when rolloutTimeout's five minutes ran out.
func movedWithin(n int) time.Duration {
	return max(rolloutTimeout, time.Duration(n/50)*time.Second)
}

// settledWithin bounds how long after a move of n VMs its verdicts may
// take to be stored and its revisions pruned: the verdict deadline, and
// two minutes for each 10,000 stores (the pruning goes on beside them).
func settledWithin(n int) time.Duration {
	return stoppedObserveTimeout + time.Duration(max(1, (n+9999)/10000))*2*time.Minute
}

// runsAt is how many runs the stopped section makes at n VMs
// (-bench.runs: one figure per size, in order, the last for any more).
func runsAt(t *testing.T, n int) int {
	t.Helper()
	all, list := sizes(t, *benchStoppedVMs), sizes(t, *benchStoppedRuns)
	i := min(slices.Index(all, n), len(list)-1)
	if list[i] < 1 {
		t.Fatalf("-bench.runs %s: at least one run", *benchStoppedRuns)
	}
	return list[i]
}

// inTurn makes a run's two moves: going first, the re-pin and then the
// switch; going second, the switch (the fleet back) and then the re-pin.
// So neither kvlive nor the loop re-pins a VM whose status still pins the
// instance type it was switched from: kvlive leaves that pin to the VM's
// next boot, as KubeVirt does, and the loop's JSON patch would move only
// its revision.
func inTurn(first bool, repin, swtch func()) {
	if first {
		repin()
		swtch()
		return
	}
	swtch()
	repin()
}

// idleAfterRollout is how long after its last outcome kvlive run is
// surely idle again (applier.Activity's 2 s and followActivity's look
// every second, with a margin).
const idleAfterRollout = 5 * time.Second

// stoppedRSSAim is the memory aim a stopped fleet of n VMs is held to:
// issue 26's, 120 MiB with 20,000 stopped VMs cached, and 600 MiB with
// 100,000 VMs (and 75,000 VMIs, more than a stopped fleet holds).
func stoppedRSSAim(n int) (string, uint64) {
	if n <= 20000 {
		return "< 120 MiB (the aim at 20,000)", 120 << 20
	}
	return "< 600 MiB (the aim at 100,000 with 75,000 VMIs)", 600 << 20
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
// from the edit or the command's start to the last outcome; with
// profileAPI, the API server's CPU is profiled for its first 5 seconds.
func (e *env) stoppedRollout(on *fleetOn, swtch bool, profileAPI bool) applyRun {
	e.t.Helper()
	e.waitQuiet("kvlive's rollout")
	before, apiBefore, natsBefore := readCPU(e.t), e.readAPI(), e.readNATS()
	start := time.Now()
	profiled := e.maybeProfileAPIServer(profileAPI, "kvlive's "+moveName(swtch))
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
	during := func() {}
	if e.onRollout != nil {
		during = e.onRollout(id)
	}
	p := e.follow(id)
	during()
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
	profiled()
	e.t.Logf("%s: start → first outcome %v, → last %v (%.0f VMs/s); the API server served %v", id, first.Sub(start), last.Sub(start), float64(wrote)/last.Sub(start).Seconds(), api)
	if swtch {
		on.swap()
		e.waitReferencing(on.it)
	} else {
		e.waitPinnedTo(on.it)
	}
	return applyRun{rate: float64(wrote) / last.Sub(start).Seconds(), cpu: cpu, api: api, nats: msgs, eventID: id, start: first.Sub(start)}
}

// stoppedRawLoop makes the same writes as kvlive from rawLoopWorkers
// goroutines on a client without a client-side limit: a re-pin after an
// edit of the instance type (the edit not timed; its event id, which kvlive
// plans when it next starts, is the run's eventID), or a switch to the
// other; with profileAPI, as stoppedRollout.
func (e *env) stoppedRawLoop(on *fleetOn, swtch bool, profileAPI bool) applyRun {
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
	unwatch := watchFleet(e.t, clients)
	e.waitQuiet("the raw loop")
	before, apiBefore := readCPU(e.t), e.readAPI()
	profiled := e.maybeProfileAPIServer(profileAPI, "the raw loop's "+moveName(swtch))
	_, took := e.rawWrites(clients, vms, target, swtch, rawLoopWorkers)
	cpu, api := readCPU(e.t).since(before), e.readAPI().since(apiBefore)
	profiled()
	unwatch()
	e.t.Logf("raw loop: %d VMs in %v (%.0f VMs/s); the API server served %v", len(vms), took, float64(len(vms))/took.Seconds(), api)
	if swtch {
		on.swap()
		e.waitReferencing(on.it)
	} else {
		e.waitPinnedTo(on.it)
	}
	return applyRun{rate: float64(len(vms)) / took.Seconds(), cpu: cpu, api: api, eventID: edit}
}

// watchFleet watches what a controller of the fleet watches, as kvlive
// run does during its own moves: the VMs, and the instancetype revisions
// (kvlive's selector), each by an informer on clients; so the API server
// encodes and sends each move's watch events under the raw loop too. The
// returned function stops the informers.
func watchFleet(t *testing.T, clients kube.Clients) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	vms := clients.Virt.KubevirtV1().VirtualMachines("")
	revisions := clients.Kube.AppsV1().ControllerRevisions("")
	selected := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector = instancetypeapi.ControllerRevisionObjectKindLabel
		return o
	}
	informers := []cache.SharedIndexInformer{
		cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return vms.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return vms.Watch(ctx, o)
			},
		}, &virtv1.VirtualMachine{}, 0, cache.Indexers{}),
		cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return revisions.List(ctx, selected(o))
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return revisions.Watch(ctx, selected(o))
			},
		}, &appsv1.ControllerRevision{}, 0, cache.Indexers{}),
	}
	var wg sync.WaitGroup
	for _, inf := range informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), informers[0].HasSynced, informers[1].HasSynced) {
		t.Fatal("the raw loop's watches did not sync")
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// maybeProfileAPIServer profiles the API server for 5 seconds during
// what, if asked; the returned function waits for the profile and logs it.
func (e *env) maybeProfileAPIServer(asked bool, what string) (done func()) {
	if !asked {
		return func() {}
	}
	return e.profileAPIServer(what, 5*time.Second)
}

func moveName(swtch bool) string {
	if swtch {
		return "switch"
	}
	return "re-pin"
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

// starts is each run's start (applyRun.start), in seconds.
func starts(runs []applyRun) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = r.start.Seconds()
	}
	return out
}

// ownRatios is the spread of each run's own ratio of kvlive's rate to the
// loop's, the two rates of one run side by side (k[i] and r[i] are run
// i's), with more than one run: how far the runs' noise moves the ratio.
func ownRatios(k, r []float64) string {
	if len(k) < 2 || len(k) != len(r) {
		return ""
	}
	own := make([]float64, len(k))
	for i := range k {
		own[i] = k[i] / r[i]
	}
	return "; each run's own " + spread("%.2f", own) + "×"
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

// spread prints the smallest and largest of v in format, or the one
// value when they print the same.
func spread(format string, v []float64) string {
	lo, hi := fmt.Sprintf(format, slices.Min(v)), fmt.Sprintf(format, slices.Max(v))
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// logRevisions logs the instancetype revisions the cluster holds, as
// kvlive run caches them: how many the VMs' pins name, and of the rest
// how many kvlive created (its pruner's to delete beyond the retention)
// and how many it did not (never its to delete); and how many of each
// generation of each instance type. The bench's VMs have no preference.
func (e *env) logRevisions() {
	e.t.Helper()
	crs, err := e.clients.Kube.AppsV1().ControllerRevisions(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Logf("revisions in the cluster: %v", err)
		return
	}
	vms, err := e.clients.Virt.KubevirtV1().VirtualMachines(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Logf("revisions in the cluster: %v", err)
		return
	}
	pinned := map[string]bool{}
	for i := range vms.Items {
		if pin, err := instancetype.PinOf(&vms.Items[i], false); err == nil {
			pinned[vms.Items[i].Namespace+"/"+pin.Revision] = true
		}
	}
	kinds, generations := map[string]int{}, map[string]int{}
	snapshots := 0
	for _, cr := range crs.Items {
		if !instancetype.IsSnapshot(&cr) {
			continue
		}
		snapshots++
		switch {
		case pinned[cr.Namespace+"/"+cr.Name]:
			kinds["pinned"]++
		case instancetype.CreatedByKvlive(&cr):
			kinds["kvlive's, unpinned"]++
		default:
			kinds["not kvlive's, unpinned"]++
		}
		generations[cr.Labels[instancetypeapi.ControllerRevisionObjectNameLabel]+" generation "+cr.Labels[instancetypeapi.ControllerRevisionObjectGenerationLabel]]++
	}
	e.t.Logf("revisions in the cluster: %d for %d VMs: %v; by generation: %v", snapshots, len(vms.Items), kinds, generations)
}
