package rollout

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

const verifyEvent = "VirtualMachineClusterInstancetype/uid-u1/2"

// verifyVM is a VM pinned to vm-new, as the applier leaves it.
func verifyVM(name string) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: "u1"}},
		Status: virtv1.VirtualMachineStatus{InstancetypeRef: &virtv1.InstancetypeStatusRef{Name: "u1",
			ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: name + "-new"}}}}
}

// moved publishes the outcome of a VM the applier moved (or, with
// result none, did not need to).
func moved(t *testing.T, js jetstream.JetStream, name string, result events.Result, attempt int, deadline time.Duration) {
	t.Helper()
	movedIn(t, js, verifyEvent, name, result, attempt, deadline)
}

// movedIn publishes the outcome of a VM the applier moved in event.
func movedIn(t *testing.T, js jetstream.JetStream, event, name string, result events.Result, attempt int, deadline time.Duration) {
	t.Helper()
	out := events.Outcome{EventID: event, VM: events.VMRef{Namespace: "ns", Name: name, UID: "uid-" + name}, Result: result,
		Revision: name + "-new", Wrote: attempt == 1, Attempt: attempt, FinishedAt: time.Now().UTC(), VerdictDeadline: deadline,
		Changes: []events.Change{{Field: "cpu.sockets", From: "2", To: "4", Class: "live"}}}
	id := events.OutcomeID(event, out.VM.UID, attempt)
	body, err := events.Encode(events.TypeOutcome, id, "kvlive/applier", out.VM.String(), out.FinishedAt, &out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), events.NewMsg(events.OutcomeSubject("ns", event), id, events.TypeOutcome, body)); err != nil {
		t.Fatal(err)
	}
}

// verdictOf reads the verdicts stored on a VM: exactly one is expected.
func verdictOf(t *testing.T, js jetstream.JetStream, name string) (events.Verdict, int) {
	t.Helper()
	return verdictIn(t, js, verifyEvent, name)
}

// verdictIn reads the verdicts stored on a VM for event.
func verdictIn(t *testing.T, js jetstream.JetStream, event, name string) (events.Verdict, int) {
	t.Helper()
	subject := events.VerdictSubject("ns", "uid-"+name, event)
	n, err := CountSubjects(t.Context(), js, events.StreamOutcomes, subject)
	if err != nil || n == 0 {
		return events.Verdict{}, n
	}
	s, err := js.Stream(t.Context(), events.StreamOutcomes)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), subject)
	if err != nil {
		t.Fatal(err)
	}
	var v events.Verdict
	if _, err := events.Decode(m.Data, events.TypeVerdict, &v); err != nil {
		t.Fatal(err)
	}
	return v, n
}

// startVerifier runs a verifier over cache until stop.
func startVerifier(t *testing.T, js jetstream.JetStream, cache *kube.Cache, deadline time.Duration) (stop func()) {
	t.Helper()
	v, err := NewVerifier(VerifierConfig{Fleet: cache, JetStream: js, Deadline: deadline, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var done sync.WaitGroup
	done.Go(func() {
		if err := v.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	return func() { cancel(); done.Wait() }
}

// TestEveryMovedVMGetsOneVerdict: the verifier stores KubeVirt's verdict on
// every VM kvlive moved, once, whatever replica reads it: a stopped VM's at
// once, a running VM's once its VMI shows the hotplug (read after the
// replica that first awaited it stopped), a VM KubeVirt never reacts to at
// the deadline; another attempt's outcome of the same VM, a redelivery, and
// an outcome that moved nothing add none.
func TestEveryMovedVMGetsOneVerdict(t *testing.T) {
	const deadline = 3 * time.Second
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.VerdictDeadline = deadline })
	vmi := testenv.RunningVMI("ns", "live")
	stuck := testenv.RunningVMI("ns", "stuck")
	clients := testenv.FakeClients(nil, verifyVM("live"), vmi, verifyVM("stopped"), verifyVM("stuck"), stuck, verifyVM("none"))
	cache := testenv.StartCache(t, clients)

	first := startVerifier(t, js, cache, time.Hour)
	moved(t, js, "stopped", events.ResultNextBoot, 1, time.Minute)
	moved(t, js, "live", events.ResultLive, 1, time.Minute)
	moved(t, js, "live", events.ResultLive, 2, time.Minute)
	moved(t, js, "none", events.ResultNone, 1, time.Minute)
	testenv.Eventually(t, 30*time.Second, "the stopped VM's verdict", func() bool { _, n := verdictOf(t, js, "stopped"); return n == 1 })
	first() // the live VM has no verdict yet: handed back

	second, third := startVerifier(t, js, cache, deadline), startVerifier(t, js, cache, deadline)
	defer second()
	defer third()
	moved(t, js, "stuck", events.ResultLive, 1, deadline)
	ctx := t.Context()
	vmi = vmi.DeepCopy()
	testenv.MigratedTo(vmi, 4, time.Now())
	if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the live VM's verdict", func() bool { _, n := verdictOf(t, js, "live"); return n == 1 })
	testenv.Eventually(t, 30*time.Second, "the stuck VM's verdict at its deadline", func() bool { _, n := verdictOf(t, js, "stuck"); return n == 1 })

	for name, want := range map[string]events.Observed{"stopped": events.ObservedNextBoot, "live": events.ObservedLive, "stuck": events.ObservedNotObserved} {
		v, n := verdictOf(t, js, name)
		if n != 1 || v.Observed != want || v.Reason == "" || v.Predicted == "" {
			t.Errorf("%s: %d verdicts, the last %+v; want one, %s", name, n, v, want)
		}
	}
	if _, n := verdictOf(t, js, "none"); n != 0 {
		t.Errorf("a VM that did not move got %d verdicts", n)
	}
	testenv.Eventually(t, 30*time.Second, "every outcome acked", func() bool {
		c, err := js.Consumer(ctx, events.StreamOutcomes, events.ConsumerVerifier)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// TestAwaitedOutcomesAreSettledAtOnce: with an ack wait of hours, an
// outcome is acked as soon as its verdict is stored, and one still
// awaited when its verifier stops is handed back at once: another replica
// stores its verdict within seconds, not after the ack wait.
func TestAwaitedOutcomesAreSettledAtOnce(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.VerdictDeadline = 2 * time.Hour })
	vmi := testenv.RunningVMI("ns", "live")
	clients := testenv.FakeClients(nil, verifyVM("stopped"), verifyVM("live"), vmi)
	cache := testenv.StartCache(t, clients)
	ctx := t.Context()
	ackPending := func() int {
		if info := consumerInfo(t, js); info != nil {
			return info.NumAckPending
		}
		return -1
	}

	first := startVerifier(t, js, cache, 2*time.Hour)
	moved(t, js, "stopped", events.ResultNextBoot, 1, 2*time.Hour)
	moved(t, js, "live", events.ResultLive, 1, 2*time.Hour)
	testenv.Eventually(t, 30*time.Second, "the stopped VM's verdict", func() bool { _, n := verdictOf(t, js, "stopped"); return n == 1 })
	testenv.Eventually(t, 10*time.Second, "the stopped VM's outcome acked (the live one delivered, awaiting)", func() bool {
		info := consumerInfo(t, js)
		return info != nil && info.NumPending == 0 && info.NumAckPending == 1
	})
	first()
	second := startVerifier(t, js, cache, 2*time.Hour)
	defer second()
	vmi = vmi.DeepCopy()
	testenv.MigratedTo(vmi, 4, time.Now())
	if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the live VM's verdict, by the replica it was handed to", func() bool { _, n := verdictOf(t, js, "live"); return n == 1 })
	testenv.Eventually(t, 10*time.Second, "every outcome acked", func() bool { return ackPending() == 0 })
}

// TestOutcomesTakenButNotReadAreHandedBack stops a verifier while the
// outcomes of 200 moved VMs are still arriving: those its client had taken
// from the server but not yet read must be handed back with the rest, so
// another replica judges every VM within seconds, not after the ack wait
// of hours.
func TestOutcomesTakenButNotReadAreHandedBack(t *testing.T) {
	const n = 200
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.VerdictDeadline = 2 * time.Hour })
	var objs []runtime.Object
	for i := range n {
		name := fmt.Sprintf("vm-%d", i)
		objs = append(objs, verifyVM(name), testenv.RunningVMI("ns", name))
	}
	clients := testenv.FakeClients(nil, objs...)
	cache := testenv.StartCache(t, clients)
	for i := range n {
		moved(t, js, fmt.Sprintf("vm-%d", i), events.ResultLive, 1, 2*time.Hour)
	}

	first := startVerifier(t, js, cache, 2*time.Hour)
	testenv.Eventually(t, 30*time.Second, "the first outcomes delivered", func() bool {
		info := consumerInfo(t, js)
		return info != nil && info.NumAckPending > 0
	})
	first() // most outcomes are still on their way to it, or unread
	second := startVerifier(t, js, cache, 2*time.Hour)
	defer second()
	ctx := t.Context()
	for i := range n {
		vmi := testenv.RunningVMI("ns", fmt.Sprintf("vm-%d", i))
		testenv.MigratedTo(vmi, 4, time.Now())
		if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "every VM's verdict, by the replica they were handed to", func() bool {
		verdicts, err := CountSubjects(ctx, js, events.StreamOutcomes, events.VerdictsOf(verifyEvent))
		return err == nil && verdicts == n // one each
	})
	testenv.Eventually(t, 10*time.Second, "every outcome acked", func() bool {
		info := consumerInfo(t, js)
		return info != nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// consumerInfo reads the verifier consumer's state, or nil.
func consumerInfo(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(t.Context(), events.StreamOutcomes, events.ConsumerVerifier)
	if err != nil {
		return nil
	}
	info, err := c.Info(t.Context())
	if err != nil {
		return nil
	}
	return info
}

// TestARedeliveredAwaitedOutcomeStaysUnacked: an outcome awaited past the
// consumer's ack wait is delivered again; the verifier keeps awaiting it
// unacked (it was acked as another attempt's outcome, so a verifier that
// stopped then lost it), and the replica it is handed back to stores the
// verdict.
func TestARedeliveredAwaitedOutcomeStaysUnacked(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.VerdictDeadline = time.Second }) // an ack wait of 2 s
	vmi := testenv.RunningVMI("ns", "live")
	clients := testenv.FakeClients(nil, verifyVM("live"), vmi)
	cache := testenv.StartCache(t, clients)
	first := startVerifier(t, js, cache, time.Hour)
	moved(t, js, "live", events.ResultLive, 1, time.Hour) // its applier waits an hour for the verdict
	testenv.Eventually(t, 30*time.Second, "the outcome delivered again after the ack wait", func() bool {
		info := consumerInfo(t, js)
		return info != nil && info.Delivered.Consumer >= 2
	})
	if info := consumerInfo(t, js); info == nil || info.NumAckPending != 1 {
		t.Errorf("the awaited outcome was acked on its second delivery: %+v", info)
	}
	first()
	second := startVerifier(t, js, cache, time.Hour)
	defer second()
	vmi = vmi.DeepCopy()
	testenv.MigratedTo(vmi, 4, time.Now())
	if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Update(t.Context(), vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the verdict, by the replica the outcome was handed to", func() bool { _, n := verdictOf(t, js, "live"); return n == 1 })
}

// TestEachOutcomeOfAVMIsJudgedAtItsDeadline: a VM moved again while its
// first verdict is awaited gets both verdicts, each at its own deadline,
// though the first deadline's wake-up comes before the second is due.
func TestEachOutcomeOfAVMIsJudgedAtItsDeadline(t *testing.T) {
	js := testenv.JetStream(t)
	clients := testenv.FakeClients(nil, verifyVM("again"), testenv.RunningVMI("ns", "again"))
	cache := testenv.StartCache(t, clients)
	stop := startVerifier(t, js, cache, time.Minute)
	defer stop()
	const second = "VirtualMachineClusterInstancetype/uid-u1/3"
	moved(t, js, "again", events.ResultLive, 1, time.Second)
	movedIn(t, js, second, "again", events.ResultLive, 1, 3*time.Second)
	testenv.Eventually(t, 30*time.Second, "both verdicts", func() bool {
		_, first := verdictOf(t, js, "again")
		_, later := verdictIn(t, js, second, "again")
		return first == 1 && later == 1
	})
}

// TestAVerdictIsStoredOnce: verifiers racing to store one VM's verdict
// store one, and so does a verifier storing it again once the stream's
// duplicate window (which alone would let a second one in) has passed, as
// a redelivery after a long pause does; the others take the stored one as
// theirs.
func TestAVerdictIsStoredOnce(t *testing.T) {
	const window = 200 * time.Millisecond
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.DuplicateWindow = window })
	clients := testenv.FakeClients([]runtime.Object{}, verifyVM("a"))
	cache := testenv.StartCache(t, clients)
	var vs []*Verifier
	for range 4 {
		v, err := NewVerifier(VerifierConfig{Fleet: cache, JetStream: js, Deadline: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if v.outcomes, err = js.Stream(t.Context(), events.StreamOutcomes); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
		t.Cleanup(func() { v.queue.ShutDown(); v.removeHandlers() })
	}
	out := events.Outcome{EventID: verifyEvent, VM: events.VMRef{Namespace: "ns", Name: "a", UID: "uid-a"}, Result: events.ResultNextBoot,
		Revision: "a-new", FinishedAt: time.Now()}
	store := func(vs ...*Verifier) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, len(vs))
		for i, v := range vs {
			wg.Go(func() {
				errs[i] = v.store(t.Context(), awaited{out: out}, judgement(out), verifyVM("a"), time.Now())
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("verifier %d: %v", i, err)
			}
		}
	}
	store(vs[:3]...)
	time.Sleep(2 * window) // past the duplicate window; nothing is measured against it
	store(vs[3])
	if _, n := verdictOf(t, js, "a"); n != 1 {
		t.Errorf("%d verdicts stored, want 1", n)
	}
	if !vs[3].stored(t.Context(), out) {
		t.Error("the verifier does not see the stored verdict")
	}
}

func judgement(o events.Outcome) instancetype.Judgement {
	return instancetype.Judgement{Observed: events.ObservedNextBoot, Reason: fmt.Sprintf("%s stopped", o.VM.Name)}
}

// TestAnOutcomeOfARecreatedVMDoesNotDisplaceTheAwaitedOne: while VM r's
// outcome awaits its verdict, an outcome of the same event arrives for a
// VM r re-created under its name (another UID). Both are awaited: the
// new one is judged at once (the cache still shows the first VM), and the
// first one still gets its verdict and is settled once its hotplug shows,
// instead of being dropped unsettled until the ack wait of hours.
func TestAnOutcomeOfARecreatedVMDoesNotDisplaceTheAwaitedOne(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.VerdictDeadline = 2 * time.Hour })
	vmi := testenv.RunningVMI("ns", "r")
	clients := testenv.FakeClients(nil, verifyVM("r"), vmi)
	cache := testenv.StartCache(t, clients)
	ctx := t.Context()
	defer startVerifier(t, js, cache, 2*time.Hour)()
	moved(t, js, "r", events.ResultLive, 1, 2*time.Hour)

	again := events.Outcome{EventID: verifyEvent, VM: events.VMRef{Namespace: "ns", Name: "r", UID: "uid-r2"}, Result: events.ResultNextBoot,
		Revision: "r-new", Wrote: true, Attempt: 1, FinishedAt: time.Now().UTC(), VerdictDeadline: 2 * time.Hour}
	id := events.OutcomeID(verifyEvent, again.VM.UID, 1)
	body, err := events.Encode(events.TypeOutcome, id, "kvlive/applier", again.VM.String(), again.FinishedAt, &again)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, events.NewMsg(events.OutcomeSubject("ns", verifyEvent), id, events.TypeOutcome, body)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the re-created VM's verdict", func() bool {
		n, err := CountSubjects(ctx, js, events.StreamOutcomes, events.VerdictSubject("ns", "uid-r2", verifyEvent))
		return err == nil && n == 1
	})

	vmi = vmi.DeepCopy()
	testenv.MigratedTo(vmi, 4, time.Now())
	if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the first VM's verdict, and every outcome settled", func() bool {
		v, n := verdictOf(t, js, "r")
		info := consumerInfo(t, js)
		return n == 1 && v.Observed == events.ObservedLive && info != nil && info.NumAckPending == 0
	})
}

// TestAVerdictCountsTheMigrationsThatFailedBeforeIt: a VM whose first
// migration fails and whose second carries the change is live, and its
// verdict keeps the failed one: named in the reason, listed, and traced.
func TestAVerdictCountsTheMigrationsThatFailedBeforeIt(t *testing.T) {
	js := testenv.JetStream(t)
	vmi := testenv.RunningVMI("ns", "retried")
	clients := testenv.FakeClients(nil, verifyVM("retried"), vmi)
	cache := testenv.StartCache(t, clients)
	v, err := NewVerifier(VerifierConfig{Fleet: cache, JetStream: js, Deadline: time.Hour, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var done sync.WaitGroup
	done.Go(func() { _ = v.Run(ctx) })
	defer func() { cancel(); done.Wait() }()
	moved(t, js, "retried", events.ResultLive, 1, time.Hour)
	seen := func() (awaiting, failed int) {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, a := range v.byVM["ns/retried"] {
			awaiting++
			failed += len(a.failed)
		}
		return awaiting, failed
	}
	testenv.Eventually(t, 30*time.Second, "the outcome awaited", func() bool { n, _ := seen(); return n == 1 })
	update := func(vmi *virtv1.VirtualMachineInstance) {
		if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The first migration fails: the hot-plug stays pending.
	failed := vmi.DeepCopy()
	start, end := metav1.NewTime(time.Now().Add(time.Second)), metav1.NewTime(time.Now().Add(2*time.Second))
	failed.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "first", SourceNode: "node01", TargetNode: "node02",
		StartTimestamp: &start, EndTimestamp: &end, Completed: true, Failed: true, FailureReason: "did not converge"}
	update(failed)
	testenv.Eventually(t, 30*time.Second, "the verifier to see the failed migration", func() bool { _, n := seen(); return n == 1 })
	carried := failed.DeepCopy()
	testenv.MigratedTo(carried, 4, time.Now().Add(3*time.Second))
	update(carried)
	testenv.Eventually(t, 30*time.Second, "the verdict", func() bool { _, n := verdictOf(t, js, "retried"); return n == 1 })
	got, _ := verdictOf(t, js, "retried")
	if got.Observed != events.ObservedLive || len(got.FailedMigrations) != 1 || got.FailedMigrations[0].UID != "first" ||
		!strings.Contains(got.Reason, "1 failed migration(s) before it: first (did not converge)") {
		t.Errorf("verdict %+v; want live, with the failed migration first kept and named", got)
	}
}
