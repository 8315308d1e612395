package soak

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/internal/testenv"
)

// scenario is everything one seed draws: the fleet, the replicas, the
// KubeVirt CR's migration budget, how long a migration takes, and the
// schedule of steps.
type scenario struct {
	seed      int64
	vms       int
	replicas  int
	budget    int
	migration time.Duration
	// rate caps each replica's moves a second (zero: no cap), and
	// slotReactions is how long a moved VM that shows no hot-plug keeps
	// its budget slot (zero: the applier's default): a slow rate makes
	// moves wait for their turn longer than that (issue 59, item 4).
	rate          float64
	slotReactions time.Duration
	// finalizeLag is how long after the VMI shows a migration's end the
	// stand-in makes its migration object final (KubeVirt: up to a
	// quarter of a second), counting it against the budget until then.
	finalizeLag time.Duration
	steps       []step
}

// step is one thing the schedule does, at a time after the replicas
// started: a rollout, an operator's step, or a fault.
type step struct {
	at time.Duration
	do string
	n  int
	// policy is an edit's rollout policy, set on u1 with the edit (the
	// kvlive.io/rollout-policy annotation; empty: none, one batch).
	policy string
}

// What a step can do. A step that cannot act when it comes (no rollout to
// undo yet, say) does nothing and says so in the report.
const (
	doEdit    = "edit"      // edit u1 (a new generation): a rollout of every VM on it
	doUndo    = "undo"      // undo the latest rollout
	doPause   = "pause"     // pause rollout n (of those started so far, modulo)
	doResume  = "resume"    // resume rollout n
	doAbort   = "abort"     // abort rollout n
	doPromote = "promote"   // promote rollout n
	doKill    = "kill"      // kill replica n (its context cut mid-write)
	doStart   = "start"     // start replica n again
	doFaults  = "faults"    // API writes fail n% of the time (0: no more)
	doStop    = "stop-vm"   // someone else stops VM n
	doStartVM = "start-vm"  // someone else starts VM n
	doDelete  = "delete-vm" // someone else deletes VM n
	doBudget  = "budget"    // the KubeVirt CR's parallelMigrationsPerCluster becomes n
	doFail    = "fail"      // the nth migration from now fails
	doFlap    = "flap"      // pause rollout n and resume it at once
)

// policies are the rollout policies an edit draws from: none (the rollout
// in one batch) as often as the other two together; batches released by
// promote only (three, of 34%); a canary of 2 and then halves, each after
// a pause of 200 ms once its gate passed.
var policies = []string{"", "",
	`{"batchSize":"34%","pause":"manual"}`,
	`{"canary":"2","batchSize":"50%","pause":"200ms"}`}

// draw is the scenario of seed: 12 to 30 VMs (one in four stopped, one in
// five running ones not migratable), two or three replicas, a budget of 1
// to 5, migrations of 0 to 300 ms, and 8 to 20 steps over 4 seconds, the
// first an edit, with up to two flaps (a pause lifted at once) among them.
// The flaps, and each edit's rollout policy, come from sources of their
// own, so adding them left every seed's other steps as they were.
func draw(seed int64) scenario {
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	sc := scenario{
		seed:      seed,
		vms:       12 + rng.IntN(19),
		replicas:  2 + rng.IntN(2),
		budget:    1 + rng.IntN(5),
		migration: time.Duration(rng.IntN(300)) * time.Millisecond,
	}
	sc.steps = append(sc.steps, step{at: 0, do: doEdit})
	kinds := []string{doEdit, doEdit, doUndo, doPause, doPause, doResume, doResume, doAbort, doPromote,
		doKill, doKill, doStart, doStart, doFaults, doFaults, doStop, doStartVM, doStartVM, doDelete, doBudget, doFail}
	for range 8 + rng.IntN(13) {
		s := step{at: time.Duration(rng.IntN(4000)) * time.Millisecond, do: kinds[rng.IntN(len(kinds))]}
		switch s.do {
		case doKill, doStart:
			s.n = rng.IntN(sc.replicas)
		case doFaults:
			s.n = []int{0, 10, 30}[rng.IntN(3)]
		case doStop, doDelete:
			s.n = rng.IntN(sc.vms)
		case doStartVM:
			s.n = 4*rng.IntN(sc.vms/4) + 3 // one of the VMs stopped at first
		case doBudget:
			s.n = 1 + rng.IntN(5)
		case doFail:
			s.n = 1 + rng.IntN(3)
		default:
			s.n = rng.IntN(4)
		}
		sc.steps = append(sc.steps, s)
	}
	flaps := rand.New(rand.NewPCG(uint64(seed), 2))
	for range flaps.IntN(3) {
		sc.steps = append(sc.steps, step{at: time.Duration(flaps.IntN(4000)) * time.Millisecond, do: doFlap, n: flaps.IntN(4)})
	}
	// In time order; steps drawn for the same moment keep their order.
	for i := 1; i < len(sc.steps); i++ {
		for j := i; j > 0 && sc.steps[j].at < sc.steps[j-1].at; j-- {
			sc.steps[j], sc.steps[j-1] = sc.steps[j-1], sc.steps[j]
		}
	}
	// One seed in three moves slowly: a move per second a replica, four
	// workers a replica waiting for their turns, migrations half a second
	// longer, and a slot freed 2 s after its move if no hot-plug shows.
	if pace := rand.New(rand.NewPCG(uint64(seed), 4)); pace.IntN(3) == 0 {
		sc.rate, sc.slotReactions = 1, 2*time.Second
		sc.migration += 500 * time.Millisecond
	}
	sc.finalizeLag = []time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, 400 * time.Millisecond}[rand.New(rand.NewPCG(uint64(seed), 5)).IntN(4)]
	batching := rand.New(rand.NewPCG(uint64(seed), 3))
	for i := range sc.steps {
		if sc.steps[i].do == doEdit {
			sc.steps[i].policy = policies[batching.IntN(len(policies))]
		}
	}
	return sc
}

// String is the scenario as a failing seed prints it.
func (sc scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d VMs, %d replicas, a budget of %d, migrations of %v (their objects final %v after)", sc.seed, sc.vms, sc.replicas, sc.budget, sc.migration, sc.finalizeLag)
	if sc.rate > 0 {
		fmt.Fprintf(&b, ", %v moves a second a replica, a slot without a hot-plug kept %v", sc.rate, sc.slotReactions)
	}
	b.WriteString("\n")
	for _, s := range sc.steps {
		fmt.Fprintf(&b, "  %6v  %s %d", s.at, s.do, s.n)
		if s.policy != "" {
			fmt.Fprintf(&b, " policy %s", s.policy)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// vmName is VM i's namespace and name.
func vmName(i int) (namespace, name string) {
	return fmt.Sprintf("ns-%d", i%2), fmt.Sprintf("vm-%02d", i)
}

// vm is VM i on u1, with its VMI when it runs: one in four stopped, one
// in five of the others not live-migratable.
func (sc scenario) vm(i int) []runtime.Object {
	ns, name := vmName(i)
	running := i%4 != 3
	strategy := virtv1.RunStrategyHalted
	if running {
		strategy = virtv1.RunStrategyAlways
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &strategy, Instancetype: &virtv1.InstancetypeMatcher{Name: "u1"},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"}}},
	}
	if !running {
		return []runtime.Object{vm}
	}
	vmi := testenv.RunningVMI(ns, name)
	if i%5 == 4 {
		vmi.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable,
			Status: corev1.ConditionFalse, Reason: virtv1.VirtualMachineInstanceReasonDisksNotMigratable}}
	}
	return []runtime.Object{vm, vmi}
}
