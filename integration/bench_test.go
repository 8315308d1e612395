//go:build integration && bench

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/applier"
	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/integration/framework"
	"kvlive/internal/bus"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// switchRequested finds the event id in kvlive switch's output.
var switchRequested = regexp.MustCompile(`switch requested: (\S+)`)

// hack/bench.sh runs TestBench; these size it.
var (
	benchVMs           = flag.Int("bench.vms", 2000, "VMs each apply-throughput run moves")
	benchKubectlVMs    = flag.Int("bench.kubectl-vms", 100, "VMs the kubectl loop moves (its rate is per VM, so it is scaled)")
	benchEdits         = flag.Int("bench.edits", 20, "edits timed for edit-to-write latency")
	benchMemory        = flag.String("bench.memory", "10000", "fleet sizes (comma separated, three VMs in four running) whose kvlive run RSS is read")
	benchMemoryStopped = flag.String("bench.memory-stopped", "", "fleet sizes (comma separated) of stopped VMs whose kvlive run RSS is read")
	benchRollouts      = flag.Int("bench.store-rollouts", 100, "rollouts the store holds for the per-event commands")
	benchPlans         = flag.Int("bench.plans", 20000, "plans sent through each bus")
	benchSections      = flag.String("bench.sections", "stopped,bus", "sections to run: stopped and bus by default (about 10 minutes); apply (kvlive and the loops with the stand-in reacting, kubectl, latency and the store), latency alone, planner, memory, revisions (ControllerRevisions after 10 edits), switch (a switch's preview among 100,000 unrelated revisions), migrations (a live rollout of 1,000 running VMs through the stand-in's migrations, about 8 minutes) and pages (a 1,000-VM re-pin with and without three live dashboard pages and a stalled one, about 3 minutes) when named")
	benchCached        = flag.String("bench.cached", "10000,100000", "cached fleet sizes (comma separated) the planner plans against")
)

// benchSettings are client settings kvlive is measured at, with the raw
// loop at the same ones.
type benchSettings struct {
	name            string
	qps, burst, wrk int
}

// Defaults are kvlive run's own; large doubles the limits and the workers.
var (
	benchDefaults = benchSettings{"defaults", 1000, 2000, 32}
	benchLarge    = benchSettings{"large fleet", 2000, 4000, 64}
)

func (s benchSettings) String() string {
	return fmt.Sprintf("%s (--qps %d --burst %d --workers %d)", s.name, s.qps, s.burst, s.wrk)
}

func (s benchSettings) args() []string {
	return []string{"--qps", strconv.Itoa(s.qps), "--burst", strconv.Itoa(s.burst), "--workers", strconv.Itoa(s.wrk)}
}

// benchTable collects the figures, printed together at the end: each
// row's aim, where it has one, and whether this run met it.
type benchTable struct {
	mu   sync.Mutex
	rows [][5]string
}

// add records a figure without an aim; note says what to compare it with.
func (b *benchTable) add(section, what, figure, note string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows = append(b.rows, [5]string{section, what, figure, note, ""})
}

// aim records a figure with the aim it is held to and whether it met it.
func (b *benchTable) aim(section, what, figure, aim string, met bool) {
	verdict := "not met"
	if met {
		verdict = "met"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows = append(b.rows, [5]string{section, what, figure, aim, verdict})
}

func (b *benchTable) print() {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "=== kvlive bench")
	fmt.Fprintf(w, "machine: %s, %d cores, %s\n", cpuModel(), goruntime.NumCPU(), goruntime.Version())
	fmt.Fprintln(w, "| section | what | figure | aim | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range b.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r[0], r[1], r[2], r[3], r[4])
	}
	fmt.Fprintln(w, "=== end")
	_ = w.Flush()
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return goruntime.GOARCH
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return goruntime.GOARCH
}

// TestBench measures kvlive on the real servers and prints one table
// (hack/bench.sh). It fails only when something did not work, never on a
// figure.
func TestBench(t *testing.T) {
	tab := &benchTable{}
	defer tab.print()
	if f := flag.Lookup("bench.sections"); atDefaults("bench.sections", "bench.stopped", "bench.runs", "bench.plans") {
		began := time.Now()
		defer func() {
			took := time.Since(began)
			tab.aim("time", "the default sections ("+f.DefValue+"), the servers' start included", took.Round(time.Second).String(), "≤ 10 minutes", took <= 10*time.Minute)
		}()
	}
	for _, s := range []struct {
		name string
		run  func(*testing.T, *benchTable)
	}{{"stopped", benchStopped}, {"apply", benchApply}, {"latency", benchLatencyAlone}, {"planner", benchPlanner}, {"memory", benchRSS}, {"bus", benchBus}, {"revisions", benchRevisions}, {"switch", benchSwitchPlan}, {"migrations", benchMigrations}, {"pages", benchPages}} {
		if slices.Contains(strings.Split(*benchSections, ","), s.name) {
			t.Run(s.name, func(t *testing.T) { s.run(t, tab) })
		}
	}
}

// atDefaults reports whether each flag named is at its default value.
func atDefaults(names ...string) bool {
	for _, name := range names {
		if f := flag.Lookup(name); f == nil || f.Value.String() != f.DefValue {
			return false
		}
	}
	return true
}

// fleetOn tracks which instance type the benched VMs are on.
type fleetOn struct{ it, other string }

func (f *fleetOn) swap() { f.it, f.other = f.other, f.it }

// benchApply: kvlive against the raw client-go loop and kubectl, then
// latency and the store, on one fleet. Each run also reads the CPU every
// process used per VM, and the switch at the defaults is profiled.
func benchApply(t *testing.T, tab *benchTable) {
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: *benchVMs, itSmall: 20}})
	on := &fleetOn{itMedium, itLarge}
	moved := func() []vmShape { return e.selectShapes(func(s vmShape) bool { return s.instancetype != itSmall }) }
	kvlive := map[string][2]applyRun{}
	var firstRollout string
	var proc *kvliveProc
	var profileFor time.Duration
	for _, s := range []benchSettings{benchLarge, benchDefaults} {
		proc = e.runKvlive("kvlive "+s.name, append(s.args(), "--profiling")...)
		e.waitReady(proc, syncedWithin(len(e.shapes)))
		e.waitGenerations() // the second run finds the first's, ready or not
		repin := e.benchKvliveRollout(on, false, "")
		if firstRollout == "" {
			firstRollout = repin.eventID
		}
		profiled := func() {}
		if s == benchDefaults {
			// As long as the re-pin took, within the switch.
			took := time.Duration(float64(len(moved())) / repin.rate * 0.8 * float64(time.Second))
			profileFor = min(max(took, 2*time.Second), 30*time.Second)
			kvliveDone := e.profileKvlive(proc, "the switch at the defaults", profileFor)
			apiDone := e.profileAPIServer("kvlive's switch at the defaults", profileFor)
			profiled = func() { kvliveDone(); apiDone() }
		}
		cliProfile := ""
		if s == benchDefaults {
			cliProfile = filepath.Join(e.t.TempDir(), "kvlive-switch.pprof")
		}
		kvlive[s.name] = [2]applyRun{repin, e.benchKvliveRollout(on, true, cliProfile)}
		profiled()
		if cliProfile != "" {
			out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=40", kvliveBin, cliProfile).CombinedOutput()
			e.t.Logf("profile of the kvlive switch CLI at the defaults (%v):\n%s", err, out)
		}
		if s != benchDefaults {
			proc.terminate()
		}
	}
	tab.add("memory", fmt.Sprintf("kvlive run RSS, %d VMs cached (defaults, after two rollouts)", len(e.shapes)), mib(rss(t, proc)), "")
	benchLatency(t, e, tab)
	benchStore(t, e, tab, firstRollout)
	// The control: the raw loop's switch while kvlive run (idle: a switch
	// made without it is no event of its) watches the fleet as it does in
	// a rollout, so the API server also feeds kvlive's informers.
	watched := e.benchRawLoop(on, true, benchDefaults)
	proc.terminate()

	for _, s := range []benchSettings{benchLarge, benchDefaults} {
		k := kvlive[s.name]
		for i, move := range []string{"re-pin", "switch"} {
			profiled := func() {}
			if s == benchDefaults && i == 1 {
				profiled = e.profileAPIServer("the raw loop's switch at the defaults", profileFor)
			}
			raw := e.benchRawLoop(on, i == 1, s)
			profiled()
			what := fmt.Sprintf("%s %d VMs, %s", move, len(moved()), s)
			ratio := k[i].rate / raw.rate
			tab.aim("apply", what, fmt.Sprintf("kvlive %.0f VMs/s, raw loop %.0f VMs/s: %.2f× raw", k[i].rate, raw.rate, ratio), "≥ 0.8× raw", ratio >= 0.8)
			tab.add("apply", what+", to KubeVirt's reaction done", fmt.Sprintf("kvlive %.0f VMs/s, raw loop %.0f VMs/s", k[i].settledRate, raw.settledRate), fmt.Sprintf("%.2f× raw", k[i].settledRate/raw.settledRate))
			tab.add("cpu", what, "kvlive "+k[i].cpu.perVM(len(moved())), "")
			tab.add("cpu", what, "raw loop "+raw.cpu.perVM(len(moved())), "")
			tab.add("api", what, "kvlive "+k[i].api.perVM(len(moved())), "")
			tab.add("api", what, "raw loop "+raw.api.perVM(len(moved())), "")
		}
	}
	what := fmt.Sprintf("switch %d VMs, %s, raw loop while kvlive run watches (idle)", len(moved()), benchDefaults)
	tab.add("apply", what, fmt.Sprintf("raw loop %.0f VMs/s (%.0f to KubeVirt's reaction done)", watched.rate, watched.settledRate),
		fmt.Sprintf("kvlive %.2f× it (%.2f× to done)", kvlive[benchDefaults.name][1].rate/watched.rate, kvlive[benchDefaults.name][1].settledRate/watched.settledRate))
	tab.add("cpu", what, "raw loop "+watched.cpu.perVM(len(moved())), "")
	tab.add("api", what, "raw loop "+watched.api.perVM(len(moved())), "")
	kRepin, kSwitch := e.benchKubectlLoop(on, false), e.benchKubectlLoop(on, true)
	d := kvlive[benchDefaults.name]
	tab.add("apply", fmt.Sprintf("kubectl loop, %d VMs, re-pin / switch", *benchKubectlVMs), fmt.Sprintf("%.1f / %.1f VMs/s", kRepin, kSwitch),
		fmt.Sprintf("kvlive at defaults %.0f× / %.0f× it", d[0].rate/kRepin, d[1].rate/kSwitch))
	tab.aim("apply", "kvlive at its defaults against the kubectl loop, the lesser of re-pin and switch", fmt.Sprintf("%.0f×", min(d[0].rate/kRepin, d[1].rate/kSwitch)), "≥ 50×", min(d[0].rate/kRepin, d[1].rate/kSwitch) >= 50)
}

// benchLatencyAlone is the latency figures without the apply and store
// runs around them, on the same fleet, for profiling the path from an
// edit to the first write.
func benchLatencyAlone(t *testing.T, tab *benchTable) {
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: *benchVMs, itSmall: 20}})
	proc := e.runKvlive("kvlive defaults", append(benchDefaults.args(), "--profiling")...)
	e.waitGenerations()
	benchLatency(t, e, tab)
	proc.terminate()
}

// applyRun is one apply-throughput run: VMs moved per second, the CPU
// each process used until KubeVirt's reaction was over, what the API
// server served meanwhile, and kvlive's event id.
type applyRun struct {
	// rate is to the last outcome (kvlive) or write (the loop);
	// settledRate to the end of KubeVirt's reaction.
	rate, settledRate float64
	cpu               cpuUse
	api               apiUse
	// nats is what nats-server carried (readNATS); kvlive's runs only.
	nats    apiUse
	eventID string
	// start, for kvlive's stopped moves, is how long after the edit or
	// the command's start its first outcome came (the loop has none).
	start time.Duration
}

// benchKvliveRollout edits the fleet's instance type (or switches it to
// the other) and measures the VMs moved per second, edit to last outcome.
// A switch's CLI writes a CPU profile to cliProfile when it is set.
func (e *env) benchKvliveRollout(on *fleetOn, swtch bool, cliProfile string) applyRun {
	e.t.Helper()
	e.waitQuiet("kvlive's rollout")
	before, apiBefore := readCPU(e.t), e.readAPI()
	start := time.Now()
	var id string
	if swtch {
		args := append([]string{"switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A", "--yes",
			"--from", "clusterinstancetype/" + on.it, "--to", "clusterinstancetype/" + on.other}, e.natsArgs...)
		if cliProfile != "" {
			args = append(args, "--profile", "cpu", "--profile-output", cliProfile)
		}
		out := e.kvliveCommand(time.Minute, args...)
		m := switchRequested.FindStringSubmatch(out)
		if m == nil {
			e.t.Fatalf("kvlive switch printed %q", out)
		}
		id = m[1]
		e.t.Logf("%s: kvlive switch listed the fleet, planned and requested the switch in %v", id, time.Since(start))
	} else {
		id = e.benchEdit(on.it)
	}
	p := e.follow(id)
	first, last, wrote := time.Time{}, time.Time{}, 0
	for _, o := range p.Outcomes {
		if o.Wrote {
			wrote++
		}
		if first.IsZero() || o.FinishedAt.Before(first) {
			first = o.FinishedAt
		}
		if o.FinishedAt.After(last) {
			last = o.FinishedAt
		}
	}
	settled := e.settled(last)
	cpu, api := readCPU(e.t).since(before), e.readAPI().since(apiBefore)
	e.t.Logf("%s: request → first outcome %v, first → last %v (%.0f VMs/s), last outcome → KubeVirt done %v", id, first.Sub(start), last.Sub(first), float64(wrote-1)/last.Sub(first).Seconds(), settled.Sub(last))
	if wrote != len(p.Outcomes) || wrote == 0 {
		e.t.Fatalf("rollout %s: %d of %d outcomes wrote", id, wrote, len(p.Outcomes))
	}
	if swtch {
		on.swap()
	}
	e.waitPinnedTo(on.it)
	return applyRun{rate: float64(wrote) / last.Sub(start).Seconds(), settledRate: float64(wrote) / settled.Sub(start).Seconds(), cpu: cpu, api: api, eventID: id}
}

// benchEdit changes an instance type's spec to one it has not had (its
// vCPUs alternate between 2 and 3 and its memory grows by 1Mi each time)
// and returns the watcher's event id for it.
func (e *env) benchEdit(name string) string {
	e.t.Helper()
	it := e.instancetype(name)
	vcpus := uint32(3)
	if it.Spec.CPU.Guest == 3 {
		vcpus = 2
	}
	mem := resource.NewQuantity(it.Spec.Memory.Guest.Value()+1<<20, resource.BinarySI)
	_, id := e.editInstancetype(name, vcpus, mem.String())
	return id
}

// waitPinnedTo waits until every benched VM references it and is pinned to
// a revision of it.
func (e *env) waitPinnedTo(it string) {
	e.t.Helper()
	e.waitFor("every benched VM pinned to "+it, settleTimeout, func() (bool, string) {
		left := 0
		for _, vm := range e.fleetView().vms {
			if vm.Spec.Instancetype == nil || vm.Spec.Instancetype.Name == itSmall {
				continue
			}
			r := vm.Status.InstancetypeRef
			if vm.Spec.Instancetype.Name != it || r == nil || r.Name != it || r.ControllerRevisionRef == nil || r.ControllerRevisionRef.Name == "" {
				left++
			}
		}
		return left == 0, plural(left, "VM") + " not pinned to " + it
	})
}

// benchVMsOn lists the benched VMs on it, as pinned now.
func (e *env) benchVMsOn(it string) []*virtv1.VirtualMachine {
	var vms []*virtv1.VirtualMachine
	for _, vm := range e.fleetView().vms {
		if vm.Spec.Instancetype != nil && vm.Spec.Instancetype.Name == it {
			vms = append(vms, vm)
		}
	}
	slices.SortFunc(vms, func(a, b *virtv1.VirtualMachine) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return vms
}

// benchRawLoop makes kvlive's writes with nothing else: per VM the
// ControllerRevision and the pin patch (re-pin) or the reference patch
// (switch), from s.wrk goroutines sharing a client with s's limits.
func (e *env) benchRawLoop(on *fleetOn, swtch bool, s benchSettings) applyRun {
	e.t.Helper()
	if !swtch {
		e.benchEdit(on.it) // no kvlive runs: only the loop moves the VMs
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
	cfg.QPS, cfg.Burst = float32(s.qps), s.burst
	clients, err := kube.NewClients(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitQuiet("the raw loop")
	before, apiBefore := readCPU(e.t), e.readAPI()
	start, took := e.rawWrites(clients, vms, target, swtch, s.wrk)
	settled := e.settled(start.Add(took))
	cpu, api := readCPU(e.t).since(before), e.readAPI().since(apiBefore)
	e.t.Logf("raw loop: %d VMs in %v (%.0f VMs/s), last write → KubeVirt done %v", len(vms), took, float64(len(vms))/took.Seconds(), settled.Sub(start.Add(took)))
	if swtch {
		on.swap()
	}
	e.waitPinnedTo(on.it)
	return applyRun{rate: float64(len(vms)) / took.Seconds(), settledRate: float64(len(vms)) / settled.Sub(start).Seconds(), cpu: cpu, api: api}
}

// rawWrites moves vms to target from workers goroutines sharing clients,
// each VM as rawMove does, and fails the test on the first error. It
// returns when the writes started and how long they took.
func (e *env) rawWrites(clients kube.Clients, vms []*virtv1.VirtualMachine, target *v1beta1.VirtualMachineClusterInstancetype, swtch bool, workers int) (time.Time, time.Duration) {
	e.t.Helper()
	work := make(chan *virtv1.VirtualMachine)
	errs := make(chan error, len(vms))
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for vm := range work {
				errs <- rawMove(e.ctx, clients, vm, target, swtch)
			}
		})
	}
	for _, vm := range vms {
		work <- vm
	}
	close(work)
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			e.t.Fatalf("raw loop: %v", err)
		}
	}
	return start, took
}

func rawMove(ctx context.Context, c kube.Clients, vm *virtv1.VirtualMachine, target *v1beta1.VirtualMachineClusterInstancetype, swtch bool) error {
	vms := c.Virt.KubevirtV1().VirtualMachines(vm.Namespace)
	if swtch {
		// The write kvlive's switch makes: a server-side apply as kvlive.
		_, err := vms.Patch(ctx, vm.Name, types.ApplyPatchType, applier.SwitchApply(vm, false, events.Ref{Kind: events.KindClusterInstancetype, Name: target.GetName()}),
			metav1.PatchOptions{FieldManager: instancetype.FieldManager, Force: ptr.To(true)})
		return err
	}
	pin, err := instancetype.PinOf(vm, false)
	if err != nil {
		return err
	}
	rev, err := instancetype.NewRevision(vm, target)
	if err != nil {
		return err
	}
	// The revision as kvlive's applier creates it: labelled as kvlive's
	// and naming what it supersedes. So the writes are the same, and
	// `kvlive revisions prune` deletes what the loop superseded as it
	// deletes what kvlive did; unlabelled, the loop's revisions were never
	// anyone's to delete, and every run left one more a VM in etcd and in
	// kvlive's cache.
	if _, err := c.Kube.AppsV1().ControllerRevisions(vm.Namespace).Create(ctx, instancetype.Kvlives(rev, pin.Revision), metav1.CreateOptions{}); err != nil {
		return err
	}
	patch, sub := applier.RepinPatch(vm, pin.Field, false, pin.Revision, rev.Name)
	_, err = vms.Patch(ctx, vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, sub...)
	return err
}

// benchKubectlLoop makes the same writes for the first VMs with one
// kubectl invocation each, as an operator's shell loop would.
func (e *env) benchKubectlLoop(on *fleetOn, swtch bool) float64 {
	e.t.Helper()
	if !swtch {
		e.benchEdit(on.it)
	}
	target := e.instancetype(on.it)
	if swtch {
		target = e.instancetype(on.other)
	}
	vms := e.benchVMsOn(on.it)[:*benchKubectlVMs]
	kubectl := func(stdin []byte, args ...string) {
		cmd := exec.CommandContext(e.ctx, framework.Binary(e.t, "kubectl"), append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
		if stdin != nil {
			cmd.Stdin = strings.NewReader(string(stdin))
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			e.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	start := time.Now()
	for _, vm := range vms {
		if swtch {
			m, _ := applier.MatcherOf(vm, false)
			kubectl(nil, "patch", "-n", vm.Namespace, "vm", vm.Name, "--type=json", "-p", string(applier.SwitchPatch(m, false, events.Ref{Kind: events.KindClusterInstancetype, Name: target.GetName()})))
			continue // an operator's loop patches; kvlive's write is a server-side apply
		}
		rev, err := instancetype.NewRevision(vm, target)
		if err != nil {
			e.t.Fatal(err)
		}
		rev.APIVersion, rev.Kind = "apps/v1", "ControllerRevision"
		raw, _ := json.Marshal(rev)
		kubectl(raw, "create", "-f", "-")
		pin, _ := instancetype.PinOf(vm, false)
		patch, _ := applier.RepinPatch(vm, pin.Field, false, pin.Revision, rev.Name)
		kubectl(nil, "patch", "-n", vm.Namespace, "vm", vm.Name, "--subresource=status", "--type=json", "-p", string(patch))
	}
	return float64(len(vms)) / time.Since(start).Seconds()
}

// benchLatency edits the small instance type again and again with kvlive
// running, each time on a quiet cluster: edit to first VM written (the API server's audit log times the
// write) and to first and last outcome, p50 and p99.
func benchLatency(t *testing.T, e *env, tab *benchTable) {
	var starts []time.Time
	var first, last []time.Duration
	var id string
	for range *benchEdits {
		e.waitQuiet("a latency edit")
		start := time.Now()
		p := e.follow(e.benchEdit(itSmall))
		var lo, hi time.Time
		for _, o := range p.Outcomes {
			if lo.IsZero() || o.FinishedAt.Before(lo) {
				lo = o.FinishedAt
			}
			if o.FinishedAt.After(hi) {
				hi = o.FinishedAt
			}
		}
		starts, first, last = append(starts, start), append(first, lo.Sub(start)), append(last, hi.Sub(start))
		id = p.EventID
	}
	written := e.firstWrites(starts, onInstancetype(itSmall))
	time.Sleep(6 * time.Second) // the span exporter's batch
	out, _, err := e.kvliveOnce(time.Minute, append([]string{"trace", id, "-o", "wide", "--nats-url", e.natsURL}, e.natsArgs...)...)
	t.Logf("the last latency edit's trace (%v):\n%s", err, out)
	n := len(e.selectShapes(onInstancetype(itSmall)))
	tab.aim("latency", fmt.Sprintf("edit → first VM written, %d edits of %d VMs, defaults", len(written), n), p50p99(written), "p50 < 100ms", len(written) > 0 && quantile(written, 0.5) < 100*time.Millisecond)
	tab.add("latency", fmt.Sprintf("edit → first VM's outcome, %d edits of %d VMs, defaults", len(first), n), p50p99(first), "")
	tab.add("latency", fmt.Sprintf("edit → last VM's outcome, %d edits of %d VMs, defaults", len(last), n), p50p99(last), "")
}

// firstWrites reads, for edits made one after another at starts, how long
// after each kvlive's first write of a matching VM completed, by the API
// server's audit log (same host, same clock). An edit without a write in
// its window is left out.
func (e *env) firstWrites(starts []time.Time, match func(vmShape) bool) []time.Duration {
	e.t.Helper()
	keys := map[string]bool{}
	for _, s := range e.selectShapes(match) {
		keys[s.key()] = true
	}
	firsts := make([]time.Time, len(starts))
	for _, ev := range e.kvlivePatches() {
		if ev.ResponseStatus.Code != 200 || !keys[ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name] {
			continue
		}
		// The last edit that started before the write made it.
		i := sort.Search(len(starts), func(i int) bool { return starts[i].After(ev.Done) }) - 1
		if i >= 0 && (firsts[i].IsZero() || ev.Done.Before(firsts[i])) {
			firsts[i] = ev.Done
		}
	}
	var out []time.Duration
	for i, f := range firsts {
		if !f.IsZero() {
			out = append(out, f.Sub(starts[i]))
		}
	}
	if len(out) < len(starts) {
		e.t.Logf("%d of %d edits have no write of theirs in the audit log", len(starts)-len(out), len(starts))
	}
	return out
}

func p50p99(d []time.Duration) string {
	if len(d) == 0 {
		return "no figure"
	}
	return fmt.Sprintf("p50 %v, p99 %v", quantile(d, 0.50).Round(time.Millisecond), quantile(d, 0.99).Round(time.Millisecond))
}

// quantile is the f quantile of d (not empty).
func quantile(d []time.Duration, f float64) time.Duration {
	s := slices.Sorted(slices.Values(d))
	return s[min(len(s)-1, int(f*float64(len(s))))]
}

// benchStore times the per-event commands on one real rollout, then again
// once the store also holds benchRollouts-1 other rollouts of 1,000 VMs.
func benchStore(t *testing.T, e *env, tab *benchTable, eventID string) {
	commands := [][]string{
		{"outcomes", "--event", eventID, "-o", "json"},
		{"rollout", "status", eventID},
		{"trace", eventID, "-o", "json"},
	}
	labels := []string{"kvlive outcomes --event", "kvlive rollout status", "kvlive trace"}
	timeAll := func() []time.Duration {
		var took []time.Duration
		for _, args := range commands {
			var runs []time.Duration
			for range 3 {
				start := time.Now()
				e.kvliveCommand(time.Minute, append(append(args, "--nats-url", e.natsURL), e.natsArgs...)...)
				runs = append(runs, time.Since(start))
			}
			slices.Sort(runs)
			took = append(took, runs[1])
		}
		return took
	}
	alone := timeAll()
	e.fillStore(eventID, *benchRollouts-1, 1000)
	full := timeAll()
	for i := range commands {
		ratio := full[i].Seconds() / alone[i].Seconds()
		tab.aim("store", fmt.Sprintf("%s (%d-VM rollout; median of 3, process start included)", labels[i], *benchVMs),
			fmt.Sprintf("%v alone, %v among %d rollouts: %.2f×", alone[i].Round(time.Millisecond), full[i].Round(time.Millisecond), *benchRollouts, ratio), "≈ 1 (≤ 1.10)", ratio <= 1.10)
	}
}

// fillStore stores n more rollouts of vms VMs each: rollout records,
// outcomes and spans shaped like eventID's, under other event and trace ids.
func (e *env) fillStore(eventID string, n, vms int) {
	e.t.Helper()
	kv, err := e.js.KeyValue(e.ctx, events.BucketRollouts)
	if err != nil {
		e.t.Fatal(err)
	}
	rec, err := kv.Get(e.ctx, events.RolloutKey(eventID))
	if err != nil {
		e.t.Fatal(err)
	}
	outcome := e.streamBodies(events.StreamOutcomes, events.OutcomesIn(""))[0]
	var o events.Outcome
	if _, err := events.Decode(outcome, events.TypeOutcome, &o); err != nil {
		e.t.Fatal(err)
	}
	span := e.streamBodies(events.StreamSpans)[0]
	for i := range n {
		id := fmt.Sprintf("switch/bench-%03d", i)
		var r map[string]any
		if err := json.Unmarshal(rec.Value(), &r); err != nil {
			e.t.Fatal(err)
		}
		r["eventID"] = id
		raw, _ := json.Marshal(r)
		if _, err := kv.Put(e.ctx, events.RolloutKey(id), raw); err != nil {
			e.t.Fatal(err)
		}
		var acks []jetstream.PubAckFuture
		for v := range vms {
			o.EventID, o.VM.UID, o.VM.Name = id, fmt.Sprintf("uid-%d-%d", i, v), fmt.Sprintf("vm-%d", v)
			oid := events.OutcomeID(id, o.VM.UID, 1)
			body, err := events.Encode(events.TypeOutcome, oid, "kvlive/bench", o.VM.String(), o.FinishedAt, &o)
			if err != nil {
				e.t.Fatal(err)
			}
			f, err := e.js.PublishMsgAsync(events.NewMsg(events.OutcomeSubject(o.VM.Namespace, id), oid, events.TypeOutcome, body))
			if err != nil {
				e.t.Fatal(err)
			}
			sm := nats.NewMsg(events.SpanSubject(fmt.Sprintf("%016x%016x", i, v)))
			sm.Data = span
			g, err := e.js.PublishMsgAsync(sm)
			if err != nil {
				e.t.Fatal(err)
			}
			acks = append(acks, f, g)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				e.t.Fatal(err)
			case <-time.After(time.Minute):
				e.t.Fatal("no publish ack within a minute")
			}
		}
	}
}

// benchPlanner plans one event against 10,000 and 100,000 cached VMs.
func benchPlanner(t *testing.T, tab *benchTable) {
	var per []float64
	// byReferencing is an event's time by its referencing VMs, per fleet.
	byReferencing := map[int]map[int]time.Duration{}
	fleets := sizes(t, *benchCached)
	for _, cached := range fleets {
		for _, percent := range []int{1, 10, 100} {
			n := cached * percent / 100
			f := testenv.NewPlanFleet(t, cached, n)
			r := testing.Benchmark(f.PlanEvent)
			perVM := float64(r.NsPerOp()) / float64(n)
			per = append(per, perVM)
			if byReferencing[n] == nil {
				byReferencing[n] = map[int]time.Duration{}
			}
			byReferencing[n][cached] = time.Duration(r.NsPerOp())
			tab.add("planner", fmt.Sprintf("one event, %d of %d cached VMs (%d%%)", n, cached, percent),
				fmt.Sprintf("%v per event, %.1f µs and %d allocs per VM", time.Duration(r.NsPerOp()).Round(time.Microsecond), perVM/1000, r.AllocsPerOp()/int64(n)), "")
		}
	}
	tab.add("planner", "time per referencing VM, largest / smallest of the six", fmt.Sprintf("%.2f×", slices.Max(per)/slices.Min(per)), "")
	small, large := slices.Min(fleets), slices.Max(fleets)
	for _, n := range slices.Sorted(maps.Keys(byReferencing)) {
		a, b := byReferencing[n][small], byReferencing[n][large]
		if small == large || a == 0 || b == 0 {
			continue
		}
		ratio := b.Seconds() / a.Seconds()
		tab.aim("planner", fmt.Sprintf("the same %d referencing VMs among %d and %d cached", n, small, large),
			fmt.Sprintf("%v / %v: %.2f×", a.Round(time.Microsecond), b.Round(time.Microsecond), ratio), "≈ 1 (≤ 1.10): the fleet does not matter", ratio <= 1.10)
	}
}

// memoryAims are issue 26's: kvlive run's RSS with these fleets cached.
var memoryAims = map[[2]int]uint64{
	{100000, 75000}: 600 << 20, // 100,000 VMs, 75,000 running
	{20000, 0}:      120 << 20, // 20,000 stopped VMs
}

// benchRSS reads kvlive run's resident memory and live heap with fleets
// of the sizes asked for (three VMs in four running, and all stopped),
// idle after a metrics scrape (what a monitored kvlive does), logs where
// the heap goes by function (every per-VM structure kvlive
// holds, the informers' included), and what dropping managed fields saves
// per cached object.
func benchRSS(t *testing.T, tab *benchTable) {
	type point struct {
		vms int
		rss uint64
	}
	var points []point
	fleets := []fleetOptions{}
	for _, n := range sizes(t, *benchMemory) {
		fleets = append(fleets, fleetOptions{namespaces: 10, perIT: map[string]int{itMedium: n}})
	}
	if *benchMemoryStopped != "" {
		for _, n := range sizes(t, *benchMemoryStopped) {
			fleets = append(fleets, fleetOptions{namespaces: 10, perIT: map[string]int{itMedium: n}, stopped: true})
		}
	}
	for _, o := range fleets {
		n := o.perIT[itMedium]
		t.Run(fmt.Sprintf("%d-stopped-%v", n, o.stopped), func(t *testing.T) {
			e := newEnv(t, o)
			proc := e.runKvlive("kvlive defaults", append(benchDefaults.args(), "--profiling")...)
			e.waitGenerations()
			time.Sleep(5 * time.Second) // informers settled
			e.logGoMemory(proc)         // a scrape, as Prometheus makes every 30 s or so
			r := rss(t, proc)
			running := len(e.fleetView().vmis)
			heap := e.heapProfile(proc, fmt.Sprintf("%d VMs and %d VMIs cached", n, running))
			what := fmt.Sprintf("kvlive run RSS, %d VMs and %d VMIs cached, idle, scraped", n, running)
			figure := fmt.Sprintf("%s (live heap %s, %.1f KiB per VM)", mib(r), mib(heap), float64(heap)/float64(n)/1024)
			if limit, ok := memoryAims[[2]int{n, running}]; ok {
				tab.aim("memory", what, figure, "< "+mib(limit), r < limit)
			} else {
				tab.add("memory", what, figure, "")
			}
			if !o.stopped {
				points = append(points, point{n, r})
			}
			if len(points) == 1 && !o.stopped {
				e.benchManagedFields(tab)
			}
		})
	}
	if len(points) > 1 {
		a, b := points[0], points[len(points)-1]
		tab.add("memory", fmt.Sprintf("RSS growth per cached VM (with its VMI), %d → %d VMs", a.vms, b.vms), fmt.Sprintf("%.1f KiB", float64(b.rss-a.rss)/float64(b.vms-a.vms)/1024), "")
	}
}

// logGoMemory scrapes kvlive run's metrics and logs where its Go runtime
// says its memory is (the go_memstats_ metrics): what the heap holds, what
// it has freed but kept, what it gave back, the next collection's goal and
// the stacks; and the collection target then in force (GOGC, which kvlive
// run lowers once idle) and how long ago the last collection ran.
func (e *env) logGoMemory(p *kvliveProc) {
	e.t.Helper()
	_, body, err := httpGet("http://" + e.metricsAddr(p) + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	var parts []string
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, "go_gc_gogc_percent "); ok {
			parts = append(parts, "GOGC "+strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(line, "go_memstats_last_gc_time_seconds "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				parts = append(parts, fmt.Sprintf("last collection %v ago", time.Since(time.Unix(0, int64(f*1e9))).Round(100*time.Millisecond)))
			}
		}
		for _, name := range []string{"heap_alloc", "heap_inuse", "heap_idle", "heap_released", "next_gc", "stack_inuse", "sys"} {
			if v, ok := strings.CutPrefix(line, "go_memstats_"+name+"_bytes "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					parts = append(parts, fmt.Sprintf("%s %s", name, mib(uint64(f))))
				}
			}
		}
	}
	e.t.Logf("kvlive run's Go memory: %s", strings.Join(parts, ", "))
}

// benchManagedFields measures, in this process, the heap a list of the
// fleet's VMs and VMIs holds with and without their managed fields, which
// kvlive's informers drop (kube.StripUnread).
func (e *env) benchManagedFields(tab *benchTable) {
	heap := func(keep func() any) (uint64, any) {
		goruntime.GC()
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		v := keep()
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		return after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc), v
	}
	list := func(strip bool) any {
		vms, err := e.clients.Virt.KubevirtV1().VirtualMachines("").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		vmis, err := e.clients.Virt.KubevirtV1().VirtualMachineInstances("").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if strip {
			for i := range vms.Items {
				_, _ = kube.StripUnread(&vms.Items[i])
			}
			for i := range vmis.Items {
				_, _ = kube.StripUnread(&vmis.Items[i])
			}
		}
		return []any{vms, vmis}
	}
	full, v1 := heap(func() any { return list(false) })
	stripped, v2 := heap(func() any { return list(true) })
	goruntime.KeepAlive(v1)
	goruntime.KeepAlive(v2)
	n := len(e.shapes)
	tab.add("memory", fmt.Sprintf("heap of %d VMs with their VMIs as listed / without managed fields", n),
		fmt.Sprintf("%.1f / %.1f KiB per VM", float64(full)/float64(n)/1024, float64(stripped)/float64(n)/1024), fmt.Sprintf("%.0f%% saved by the informer transform", 100*(1-float64(stripped)/float64(full))))
}

// sizes parses a comma-separated list of positive counts.
func sizes(t *testing.T, list string) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("%q is not a list of counts", list)
		}
		out = append(out, n)
	}
	return out
}

// rss is kvlive run's resident memory (VmRSS); the log gets its parts:
// anonymous (the Go heap and stacks), file (the binary's pages) and shared.
func rss(t *testing.T, p *kvliveProc) uint64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, "Rss") {
			parts = append(parts, strings.Join(strings.Fields(line), " "))
		}
	}
	total, ok := statusRSS(string(raw))
	if !ok {
		t.Fatal("no VmRSS")
	}
	t.Logf("kvlive run RSS %s: %s", mib(total), strings.Join(parts, ", "))
	return total
}

// vmRSS is kvlive run's resident memory, if it can be read.
func vmRSS(p *kvliveProc) (uint64, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	return statusRSS(string(raw))
}

// statusRSS reads VmRSS from a /proc/<pid>/status.
func statusRSS(status string) (uint64, bool) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// benchBus sends plans through each kind of NATS: publish to the plans
// stream and consume with the applier's durable consumer, acking each.
func benchBus(t *testing.T, tab *benchTable) {
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := bus.ConnectEmbedded(ns, "bench", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	embedded := benchPlansPerSecond(t, nc, 1)
	external := benchPlansPerSecond(t, benchConnect(t, framework.StartNATS(t).URL), 1)
	cluster := benchPlansPerSecond(t, benchConnect(t, framework.StartNATSCluster(t, 3).URL), 3)
	tab.add("bus", fmt.Sprintf("%d plans published and consumed (applier's consumer, acked)", *benchPlans),
		fmt.Sprintf("embedded %.0f/s, external %.0f/s, 3-node cluster (R3) %.0f/s", embedded, external, cluster),
		fmt.Sprintf("external %.2f×, cluster %.2f× embedded", external/embedded, cluster/embedded))
}

func benchConnect(t *testing.T, url string) *nats.Conn {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func benchPlansPerSecond(t *testing.T, nc *nats.Conn, replicas int) float64 {
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	o := events.DefaultStreamOptions()
	o.Replicas = replicas
	if err := events.Setup(t.Context(), js, o, nil); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 1500) // a plan with its changes is about this size
	for i := range body {
		body[i] = 'x'
	}
	cons, err := js.Consumer(t.Context(), events.StreamPlans, events.ConsumerApplier)
	if err != nil {
		t.Fatal(err)
	}
	n := *benchPlans
	done := make(chan struct{})
	var acked int
	start := time.Now()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := m.Ack(); err != nil {
			t.Error(err)
		}
		if acked++; acked == n {
			close(done)
		}
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	for i := range n {
		id := fmt.Sprintf("bench/%d", i)
		if _, err := js.PublishMsgAsync(events.NewMsg(events.PlanSubject("bench", "bench-event"), id, events.TypePlan, body), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 { // as the planner does: a bounded window of unacknowledged publishes
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("publishes not acknowledged within a minute")
			}
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("%d of %d plans consumed after 5 minutes", acked, n)
	}
	return float64(n) / time.Since(start).Seconds()
}

// clientConfig loads a kubeconfig for a client of the bench's own.
func clientConfig(kubeconfig string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}
