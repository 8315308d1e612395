package applier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"go.opentelemetry.io/otel/trace/noop"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/consumer"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// fixture: cluster instance type u1 at generation 2, VM "a" (stopped)
// pinned to generation 1's snapshot.
func fixture(t *testing.T) (*Applier, kube.Clients, events.Plan) {
	t.Helper()
	u1 := &v1beta1.VirtualMachineClusterInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "u1", UID: "uid-u1", Generation: 1},
		Spec:       v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 2}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("4Gi")}},
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a"},
		Spec:       virtv1.VirtualMachineSpec{Instancetype: &virtv1.InstancetypeMatcher{Name: "u1"}},
	}
	gen1, err := instancetype.NewRevision(vm, u1)
	if err != nil {
		t.Fatal(err)
	}
	vm.Status.InstancetypeRef = &virtv1.InstancetypeStatusRef{Name: "u1", ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: gen1.Name}}
	u1.Generation, u1.Spec.CPU.Guest = 2, 3
	clients := testenv.FakeClients([]runtime.Object{gen1}, u1, vm)
	f := testenv.StartCache(t, clients)
	a, err := New(Config{Clients: clients, Fleet: f, JetStream: testenv.JetStream(t)})
	if err != nil {
		t.Fatal(err)
	}
	plan := events.Plan{
		EventID: "VirtualMachineClusterInstancetype/uid-u1/2",
		VM:      events.VMRef{Namespace: "ns", Name: "a", UID: "uid-a"},
		Action:  events.ResultNextBoot,
		Target: events.Target{Move: events.MoveRepin, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"},
			UID: "uid-u1", Generation: 2, Pin: events.PinStatus, FromRevision: gen1.Name},
	}
	return a, clients, plan
}

const gen2 = "a-u1-v1beta1-uid-u1-2"

func pinOf(t *testing.T, c kube.Clients) string {
	t.Helper()
	vm, err := c.Virt.KubevirtV1().VirtualMachines("ns").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vm.Status.InstancetypeRef.ControllerRevisionRef.Name
}

func TestApplyRepinsThenIsIdempotent(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	out, err := a.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != events.ResultNextBoot || !out.Wrote || out.Revision != gen2 || pinOf(t, clients) != gen2 {
		t.Fatalf("first apply: %+v, pin %s", out, pinOf(t, clients))
	}
	// The revision is kvlive's (the pruner's to delete once superseded)
	// and names the one it took the pin from (what undo moves back to).
	cr, err := clients.Kube.AppsV1().ControllerRevisions("ns").Get(ctx, gen2, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !instancetype.CreatedByKvlive(cr) || cr.Annotations[instancetype.SupersedesAnnotation] != plan.Target.FromRevision {
		t.Errorf("revision %s: labels %v, annotations %v; want kvlive's, superseding %s", gen2, cr.Labels, cr.Annotations, plan.Target.FromRevision)
	}
	// A redelivery (crash before the ack) finds the VM at the target,
	// even while the cache still shows the old pin.
	out, err = a.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if out.Wrote || out.Result != events.ResultNextBoot || !strings.Contains(out.Reason, "already pinned") {
		t.Fatalf("second apply: %+v", out)
	}
}

func TestApplyReplansWhenThePinMoved(t *testing.T) {
	a, clients, plan := fixture(t)
	plan.Target.FromRevision = "a-u1-v1beta1-uid-u1-0" // what the planner saw is gone
	out, err := a.apply(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Wrote || out.Result != events.ResultNextBoot || !strings.Contains(out.Reason, "re-planned") || pinOf(t, clients) != gen2 {
		t.Fatalf("outcome %+v, pin %s", out, pinOf(t, clients))
	}
}

func TestApplyRechecksASkipMadeOnAStaleCache(t *testing.T) {
	a, clients, plan := fixture(t)
	// The planner's cache showed the VM before KubeVirt pinned it.
	plan.Action, plan.Recheck, plan.Reason = events.ResultSkip, true, "KubeVirt has not pinned the VM to a revision yet"
	plan.Target.Pin, plan.Target.FromRevision = "", ""
	out, err := a.apply(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Wrote || out.Result != events.ResultNextBoot || !strings.Contains(out.Reason, "cache was behind") || len(out.Changes) == 0 || pinOf(t, clients) != gen2 {
		t.Fatalf("outcome %+v, pin %s", out, pinOf(t, clients))
	}
}

func TestApplyRecheckKeepsASkipTheServerAgreesWith(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	vms := clients.Virt.KubevirtV1().VirtualMachines("ns")
	vm, _ := vms.Get(ctx, "a", metav1.GetOptions{})
	vm.Status.InstancetypeRef = nil
	if _, err := vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	plan.Action, plan.Recheck, plan.Reason = events.ResultSkip, true, "KubeVirt has not pinned the VM to a revision yet"
	out, err := a.apply(ctx, plan)
	if err != nil || out.Wrote || out.Result != events.ResultSkip || !strings.Contains(out.Reason, "not pinned") {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
}

// TestApplyLeavesAVMTheUserSwitchedAway: a user switched the VM to
// another instance type after it was planned, before KubeVirt re-pinned it
// (its pin still names u1's old snapshot). The re-pin does not write it;
// the outcome is a skip naming what the VM references now.
func TestApplyLeavesAVMTheUserSwitchedAway(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	vms := clients.Virt.KubevirtV1().VirtualMachines("ns")
	vm, _ := vms.Get(ctx, "a", metav1.GetOptions{})
	vm.Spec.Instancetype = &virtv1.InstancetypeMatcher{Name: "u3", Kind: events.KindClusterInstancetype}
	if _, err := vms.Update(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := a.apply(ctx, plan)
	if err != nil || out.Wrote || out.Result != events.ResultSkip || !strings.Contains(out.Reason, "it references clusterinstancetype/u3 now") {
		t.Fatalf("outcome %+v, err %v: want a skip naming u3", out, err)
	}
	if pin := pinOf(t, clients); pin != plan.Target.FromRevision {
		t.Errorf("pin %s, want it left at %s", pin, plan.Target.FromRevision)
	}
}

// TestApplyRetriesWhenAReplanMeetsALaggingCache: the VM was re-pinned
// (by KubeVirt, or a user) to a revision the server has and the cache has
// not seen yet. The re-plan cannot resolve the pin; that is the cache
// behind, retried like the first delivery's recheck, never a final skip.
func TestApplyRetriesWhenAReplanMeetsALaggingCache(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	const newer = "a-u1-v1beta1-uid-u1-1-resnap"
	gen1, err := clients.Kube.AppsV1().ControllerRevisions("ns").Get(ctx, plan.Target.FromRevision, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The server answers a get of the new revision; no list or watch
	// shows it, so the cache never will.
	clients.Kube.(*kubefake.Clientset).PrependReactor("get", "controllerrevisions", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.GetAction).GetName() != newer {
			return false, nil, nil
		}
		cr := gen1.DeepCopy()
		cr.Name = newer
		return true, cr, nil
	})
	vms := clients.Virt.KubevirtV1().VirtualMachines("ns")
	vm, _ := vms.Get(ctx, "a", metav1.GetOptions{})
	vm.Status.InstancetypeRef.ControllerRevisionRef.Name = newer
	if _, err := vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := a.apply(ctx, plan)
	if !errors.Is(err, errTransient) || !strings.Contains(fmt.Sprint(err), "not in the cache yet") {
		t.Fatalf("outcome %+v, err %v: want a retry, the revision not in the cache yet", out, err)
	}
	if pinOf(t, clients) != newer {
		t.Errorf("pin %s, want it left at %s", pinOf(t, clients), newer)
	}
}

func TestApplyStopsWhenTheRolloutIsPausedBeforeItsTurn(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := rollout.Open(ctx, a.cfg.JetStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Apply(ctx, plan.EventID, events.ActionPause, "", "test", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if a.watch, err = store.StartWatch(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.apply(ctx, plan); !errors.Is(err, errSteered) || !IsTransient(err) {
		t.Fatalf("apply while paused: %v, want errSteered", err)
	}
	if pin := pinOf(t, clients); pin == gen2 {
		t.Error("the VM moved while its rollout was paused")
	}
}

// TestAbortAfterTheVMMovedRecordsItMoved: the VM moved on an earlier
// delivery whose ack was lost; the rollout was aborted before the
// redelivery. The VM is recorded as moved, not "aborted before the VM
// moved", and a VM still on its old pin is recorded as skipped.
func TestAbortAfterTheVMMovedRecordsItMoved(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := rollout.Open(ctx, a.cfg.JetStream)
	if err != nil {
		t.Fatal(err)
	}
	if a.watch, err = store.StartWatch(ctx, nil); err != nil {
		t.Fatal(err)
	}
	redelivery := consumer.Delivery{Attempt: 2}
	abort := func() (events.Outcome, *consumer.Fate) {
		t.Helper()
		held, aborted := a.controlled(ctx, nil, plan, redelivery)
		if held != nil || aborted == nil {
			t.Fatalf("aborted rollout: held %v, aborted %v", held, aborted)
		}
		return a.carryOut(ctx, nil, plan, redelivery, noop.Span{}, aborted)
	}
	if _, _, err := store.Apply(ctx, plan.EventID, events.ActionAbort, "wrong size", "test", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the abort seen", func() bool { return a.watch.Of(plan.EventID).State == events.StateAborted })
	if out, fate := abort(); fate != nil || out.Result != events.ResultSkip || !strings.Contains(out.Reason, "aborted before the VM moved") {
		t.Fatalf("VM on its old pin: outcome %+v, fate %v; want skipped as aborted", out, fate)
	}

	// The first delivery moved it, then lost its ack; the redelivery comes
	// an AckWait later, when the cache has long seen the move.
	a.watch = nil
	if out, err := a.apply(ctx, plan); err != nil || !out.Wrote {
		t.Fatalf("first delivery: %+v, %v", out, err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to see the move", func() bool {
		vm := a.cfg.Fleet.VM("ns", "a")
		return vm != nil && vm.Status.InstancetypeRef.ControllerRevisionRef.Name == gen2
	})
	if a.watch, err = store.StartWatch(ctx, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the abort seen", func() bool { return a.watch.Of(plan.EventID).State == events.StateAborted })
	out, fate := abort()
	if fate != nil || out.Result != events.ResultNextBoot || out.Revision != gen2 || !strings.Contains(out.Reason, "moved before the rollout was aborted") {
		t.Fatalf("VM at the target: outcome %+v, fate %v; want it recorded as moved", out, fate)
	}
	// It names the pin it moved from, which an undo moves it back to.
	if out.From != plan.Target.FromRevision {
		t.Errorf("the moved VM's outcome says it moved from %q, want %q", out.From, plan.Target.FromRevision)
	}
	// Once the instance type moved on to a newer generation, the move the
	// first delivery made is still this rollout's (found by the soak, issue
	// 59: the redelivery said the VM was skipped).
	supersede(t, a, clients)
	if out, fate := abort(); fate != nil || out.Result != events.ResultNextBoot || out.Revision != gen2 || out.From != plan.Target.FromRevision {
		t.Fatalf("VM at the target of a superseded generation: outcome %+v, fate %v; want it recorded as moved from %s", out, fate, plan.Target.FromRevision)
	}
}

// supersede moves u1 on to generation 3 and waits until the cache shows it.
func supersede(t *testing.T, a *Applier, clients kube.Clients) {
	t.Helper()
	ctx := context.Background()
	its := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	u1, _ := its.Get(ctx, "u1", metav1.GetOptions{})
	u1.Generation = 3
	if _, err := its.Update(ctx, u1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to catch up", func() bool {
		o, _ := a.cfg.Fleet.Object(events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}).(metav1.Object)
		return o != nil && o.GetGeneration() == 3
	})
}

// TestARedeliveryAfterTheObjectMovedOnTellsTheMove: the first delivery
// moved the VM and lost its outcome (a crash, or a write answered with a
// timeout); by the redelivery the instance type moved on to a newer
// generation. The VM did move for this rollout: the outcome says so, with
// the pin it moved from, not that the plan was superseded.
func TestARedeliveryAfterTheObjectMovedOnTellsTheMove(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	if out, err := a.apply(ctx, plan); err != nil || !out.Wrote {
		t.Fatalf("first delivery: %+v, %v", out, err)
	}
	supersede(t, a, clients)
	out, err := a.apply(ctx, plan)
	if err != nil || out.Result != events.ResultNextBoot || out.Wrote || out.Revision != gen2 || out.From != plan.Target.FromRevision {
		t.Fatalf("redelivery: outcome %+v, err %v; want the move told, from %s", out, err, plan.Target.FromRevision)
	}
	// The first attempt may have found the VM moved and planned again,
	// from another pin than the plan's: the revision it created names the
	// pin it moved from, and the outcome says that one (the soak found an
	// outcome naming the plan's, which no write moved from).
	stale := plan
	stale.Target.FromRevision = "a-u1-v1beta1-uid-u1-0"
	if out, err := a.apply(ctx, stale); err != nil || out.From != plan.Target.FromRevision {
		t.Fatalf("redelivery of a plan the first attempt re-planned: outcome %+v, err %v; want it moved from %s, as the revision says", out, err, plan.Target.FromRevision)
	}
}

func TestApplyDeletedVMIsSkipped(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	if err := clients.Virt.KubevirtV1().VirtualMachines("ns").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to catch up", func() bool { return a.cfg.Fleet.VM("ns", "a") == nil })
	out, err := a.apply(ctx, plan)
	if err != nil || out.Result != events.ResultSkip || out.Wrote || !strings.Contains(out.Reason, "deleted") {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
}

func TestApplyDeletedInstancetypeIsSkipped(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	if err := clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Delete(ctx, "u1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to catch up", func() bool { return a.cfg.Fleet.Object(plan.Target.Object) == nil })
	out, err := a.apply(ctx, plan)
	if err != nil || out.Result != events.ResultSkip || out.Wrote || !strings.Contains(out.Reason, "deleted") {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	if pinOf(t, clients) == gen2 {
		t.Error("VM moved to a deleted instance type")
	}
}

func TestApplySupersededGenerationIsSkipped(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	supersede(t, a, clients)
	out, err := a.apply(ctx, plan)
	if err != nil || out.Result != events.ResultSkip || !strings.Contains(out.Reason, "superseded") {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
}

func TestIsTransient(t *testing.T) {
	// A cancelled context is a shutdown's doing: the plan goes back to the
	// stream, never into a failed outcome.
	if !IsTransient(context.DeadlineExceeded) || !IsTransient(context.Canceled) {
		t.Error("deadline and cancel should be transient")
	}
}

// TestAnOutcomePublishedAheadCannotSuppressTheRealOne: whoever can publish
// on the outcomes subjects stores an outcome under the Nats-Msg-Id the
// applier's would have had; the applier's outcome is stored all the same.
func TestAnOutcomePublishedAheadCannotSuppressTheRealOne(t *testing.T) {
	a, _, plan := fixture(t)
	ctx := t.Context()
	js := a.cfg.JetStream
	id := events.OutcomeID(plan.EventID, plan.VM.UID, 1)
	forged := events.Outcome{EventID: plan.EventID, VM: plan.VM, Attempt: 1, Result: events.ResultSkip, Reason: "forged", FinishedAt: time.Now()}
	body, err := events.Encode(events.TypeOutcome, id, "someone", plan.VM.String(), time.Now(), &forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, events.NewMsg(events.OutcomeSubject(plan.VM.Namespace, plan.EventID), id, events.TypeOutcome, body)); err != nil {
		t.Fatal(err)
	}
	real := events.Outcome{EventID: plan.EventID, VM: plan.VM, Attempt: 1, Result: events.ResultNextBoot, Wrote: true, FinishedAt: time.Now()}
	if err := a.publishOutcome(ctx, real); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, events.StreamOutcomes)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.OutcomeSubject(plan.VM.Namespace, plan.EventID))
	if err != nil {
		t.Fatal(err)
	}
	var last events.Outcome
	if _, err := events.Decode(m.Data, events.TypeOutcome, &last); err != nil || last.Result != events.ResultNextBoot || !last.Wrote {
		t.Errorf("last outcome stored: %+v (%v), want the applier's", last, err)
	}
}

// TestApplyRecordsWhatTheWriteLeft: the outcome of a move keeps the VM's
// RestartRequired as the API server answered the write, so the verdict
// can tell KubeVirt's answer to the move from what stood before it; a
// write to status records no generation to wait for.
func TestApplyRecordsWhatTheWriteLeft(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	vms := clients.Virt.KubevirtV1().VirtualMachines("ns")
	vm, err := vms.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	vm.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: "True", Message: "earlier", LastTransitionTime: set},
		{Type: virtv1.VirtualMachineReady, Status: "False"}}
	if _, err := vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := a.apply(ctx, plan)
	if err != nil || !out.Wrote || out.AtMove == nil {
		t.Fatalf("apply: %+v, %v", out, err)
	}
	was, ok := out.AtMove.Condition(string(virtv1.VirtualMachineRestartRequired))
	if !ok || was.Message != "earlier" || !was.Since.Equal(set.Time) || len(out.AtMove.Conditions) != 1 || out.AtMove.Generation != 0 {
		t.Errorf("at the move: %+v; want the RestartRequired set at %s alone, no generation", out.AtMove, set)
	}
}

// TestARedeliveryFindsTheOutcomeAnEarlierDeliveryStored: a delivery that
// stored its outcome and was cut off before its ack comes again; handle
// finds that outcome (recorded) and lets it stand, rather than record
// what the VM shows by then (another rollout may have moved it: the soak
// found an abort's redelivery saying the VM never moved, over the outcome
// that said it did).
func TestARedeliveryFindsTheOutcomeAnEarlierDeliveryStored(t *testing.T) {
	a, _, plan := fixture(t)
	ctx := context.Background()
	if o, err := a.recorded(ctx, plan, 2); err != nil || o != nil {
		t.Fatalf("before any outcome: %+v, %v", o, err)
	}
	out := events.Outcome{EventID: plan.EventID, VM: plan.VM, Result: events.ResultNextBoot, Wrote: true, Revision: gen2, Attempt: 1, FinishedAt: time.Now()}
	if err := a.publishOutcome(ctx, out); err != nil {
		t.Fatal(err)
	}
	if o, err := a.recorded(ctx, plan, 2); err != nil || o == nil || !o.Wrote || o.Attempt != 1 {
		t.Fatalf("attempt 2 after attempt 1's outcome: %+v, %v; want attempt 1's", o, err)
	}
	if o, err := a.recorded(ctx, plan, 1); err != nil || o != nil {
		t.Fatalf("attempt 1 itself: %+v, %v; want none", o, err)
	}
	other := plan
	other.VM.UID = "uid-b"
	if o, err := a.recorded(ctx, other, 2); err != nil || o != nil {
		t.Fatalf("another VM of the event: %+v, %v; want none", o, err)
	}
}

// gen3 is VM "a"'s snapshot of u1's generation 3.
const gen3 = "a-u1-v1beta1-uid-u1-3"

// setPin pins VM "a" to revision, as another writer would, and waits until
// the applier's cache sees it.
func setPin(t *testing.T, a *Applier, clients kube.Clients, revision string) {
	t.Helper()
	vms := clients.Virt.KubevirtV1().VirtualMachines("ns")
	vm, err := vms.Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Status.InstancetypeRef.ControllerRevisionRef.Name = revision
	if _, err := vms.UpdateStatus(t.Context(), vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to see the VM pinned to "+revision, func() bool {
		vm := a.cfg.Fleet.VM("ns", "a")
		return vm != nil && vm.Status.InstancetypeRef.ControllerRevisionRef.Name == revision
	})
}

// movedOn stores the outcome of another rollout (generation 3's) that
// moved vm on from revision to gen3.
func movedOn(t *testing.T, a *Applier, vm events.VMRef, from string) {
	t.Helper()
	moved := events.Outcome{EventID: "VirtualMachineClusterInstancetype/uid-u1/3", VM: vm, Result: events.ResultNextBoot, Wrote: true,
		From: from, Revision: gen3, Attempt: 1, FinishedAt: time.Now()}
	if err := a.publishOutcome(t.Context(), moved); err != nil {
		t.Fatal(err)
	}
}

// TestARedeliveryTellsAMoveAnotherRolloutMovedOnFrom: the first delivery
// moved the VM and was cut off before it recorded anything; before the
// redelivery, another rollout moved the VM on from this plan's target.
// The redelivery finds the VM neither where it was planned nor at its
// target; that rollout's outcome (moved from this target) is the evidence,
// and the outcome tells the move, whether the rollout runs or was aborted
// (the soak found both recorded as skips that never moved).
func TestARedeliveryTellsAMoveAnotherRolloutMovedOnFrom(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	stored := time.Now().Add(-time.Minute)
	if out, err := a.apply(ctx, plan); err != nil || !out.Wrote {
		t.Fatalf("first delivery: %+v, %v", out, err)
	}
	supersede(t, a, clients)
	setPin(t, a, clients, gen3)
	redelivery := consumer.Delivery{Attempt: 2, Stored: stored}
	if out, fate := a.carryOut(ctx, nil, plan, redelivery, noop.Span{}, nil); fate != nil || out.Result != events.ResultSkip {
		t.Fatalf("without the evidence: outcome %+v, fate %v; want the usual skip", out, fate)
	}
	movedOn(t, a, plan.VM, gen2)
	out, fate := a.carryOut(ctx, nil, plan, redelivery, noop.Span{}, nil)
	if fate != nil || out.Result != events.ResultNextBoot || out.Revision != gen2 || out.From != plan.Target.FromRevision || !strings.Contains(out.Reason, "earlier attempt") {
		t.Fatalf("running rollout: outcome %+v, fate %v; want the move told", out, fate)
	}
	skipped := events.Outcome{Result: events.ResultSkip, Reason: "rollout aborted before the VM moved"}
	out, fate = a.carryOut(ctx, nil, plan, redelivery, noop.Span{}, &skipped)
	if fate != nil || out.Result != events.ResultNextBoot || out.Revision != gen2 || out.From != plan.Target.FromRevision {
		t.Fatalf("aborted rollout: outcome %+v, fate %v; want the move told", out, fate)
	}
}

// TestARedeliveryTellsAnUndoAnotherRolloutMovedOnFrom: as for a re-pin
// (above), for an undo's move back: its first delivery moved the VM back
// and was cut off (its write answered with a timeout) before it recorded
// anything; another rollout then moved the VM on from the revision the
// undo moved it back to. The soak found the redelivery's outcome a skip
// ("changed since the rollout moved it") beside the write it made.
func TestARedeliveryTellsAnUndoAnotherRolloutMovedOnFrom(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := context.Background()
	gen1 := plan.Target.FromRevision
	if out, err := a.apply(ctx, plan); err != nil || !out.Wrote {
		t.Fatalf("the rollout: %+v, %v", out, err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to see the VM moved", func() bool {
		vm := a.cfg.Fleet.VM("ns", "a")
		return vm != nil && vm.Status.InstancetypeRef.ControllerRevisionRef.Name == gen2
	})
	undo := events.Plan{EventID: "undo/8c0e4b1a-2f7d-4e3a-9b6c-1d5f0a7e2c94", VM: plan.VM, Action: events.ResultNextBoot,
		Target: events.Target{Move: events.MoveRevert, Object: plan.Target.Object, Pin: events.PinStatus, Revision: gen1, FromRevision: gen2}}
	stored := time.Now().Add(-time.Minute)
	if out, err := a.apply(ctx, undo); err != nil || !out.Wrote {
		t.Fatalf("the undo's first delivery: %+v, %v", out, err)
	}
	setPin(t, a, clients, gen3)
	redelivery := consumer.Delivery{Attempt: 2, Stored: stored}
	if out, fate := a.carryOut(ctx, nil, undo, redelivery, noop.Span{}, nil); fate != nil || out.Result != events.ResultSkip {
		t.Fatalf("without the evidence: outcome %+v, fate %v; want the usual skip", out, fate)
	}
	movedOn(t, a, plan.VM, gen1)
	out, fate := a.carryOut(ctx, nil, undo, redelivery, noop.Span{}, nil)
	if fate != nil || out.Result != events.ResultNextBoot || out.Revision != gen1 || out.From != gen2 || !strings.Contains(out.Reason, "earlier attempt") {
		t.Fatalf("outcome %+v, fate %v; want the move back told", out, fate)
	}
}

// TestAMoveIsDecidedAgainAtItsTurn: a VM stopped when it was planned and
// running by its move is moved as a running VM is (issue 59, item 10: it
// took no slot of the migration budget and skipped the restart window, as
// its plan said next-boot); the outcome says it was decided again. And a
// VMI no longer live-migratable by its move needs no migration (no slot).
func TestAMoveIsDecidedAgainAtItsTurn(t *testing.T) {
	t.Run("started", testStartedSincePlanned)
	t.Run("no longer migratable", testNoLongerMigratable)
	t.Run("starting", testStartingSincePlanned)
}

// testStartingSincePlanned: a VM stopped when planned and asked to start
// since, with no VMI yet, is not moved (booting from the old pin, it would
// take the new one by a migration no slot counted): the move is retried,
// and once the VMI runs it is moved live. Its last delivery moves it as
// planned.
func testStartingSincePlanned(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := t.Context()
	vms := clients.Virt.KubevirtV1().VirtualMachines("ns")
	vm, err := vms.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
	if _, err := vms.Update(ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to see the VM asked to run", func() bool {
		v := a.cfg.Fleet.VM("ns", "a")
		return v != nil && v.Spec.RunStrategy != nil
	})
	if _, err := a.apply(ctx, plan); !errors.Is(err, errStarting) {
		t.Fatalf("the move of a starting VM without a VMI: %v, want it retried until the VMI runs", err)
	}
	if got := pinOf(t, clients); got == gen2 {
		t.Fatalf("moved before its VMI ran")
	}
	if out, err := a.apply(withTurn(ctx, &turn{lastTry: true}), plan); err != nil || out.Result != events.ResultNextBoot || !out.Wrote {
		t.Fatalf("the last delivery: %+v, %v; want it moved as planned", out, err)
	}
	setPin(t, a, clients, plan.Target.FromRevision) // as it was, for the next try
	if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Create(ctx, testenv.RunningVMI("ns", "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := a.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != events.ResultLive || !out.Wrote || !needsMigration(events.Plan{Action: out.Result, Changes: out.Changes}) {
		t.Fatalf("outcome %+v; want a live move a migration carries, once the VMI runs", out)
	}
}

// TestANextBootMoveIsWrittenOnTheVMAsRead: the write of a move planned for
// a stopped VM tests the resourceVersion the VM was read at, so a start
// asked for in between fails it on the server.
func TestANextBootMoveIsWrittenOnTheVMAsRead(t *testing.T) {
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "41"},
		Status: virtv1.VirtualMachineStatus{InstancetypeRef: &virtv1.InstancetypeStatusRef{Name: "u1"}}}
	patch, _ := RepinPatch(vm, events.PinStatus, false, "r1", "r2")
	want := `[{"op":"test","path":"/metadata/resourceVersion","value":"41"},` + strings.TrimPrefix(string(patch), "[")
	if got := string(AsRead(vm, patch)); got != want {
		t.Errorf("AsRead:\n got %s\nwant %s", got, want)
	}
	vm.ResourceVersion = ""
	if got := string(AsRead(vm, patch)); got != string(patch) {
		t.Errorf("AsRead of a VM no server versioned: %s, want the patch as it was", got)
	}
}

func testNoLongerMigratable(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := t.Context()
	vmis := clients.Virt.KubevirtV1().VirtualMachineInstances("ns")
	vmi, err := vmis.Create(ctx, testenv.RunningVMI("ns", "a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to see the VMI", func() bool { return a.cfg.Fleet.VMI("ns", "a") != nil })
	vm, err := clients.Virt.KubevirtV1().VirtualMachines("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plan, err = a.replan(plan, vm); err != nil || plan.Action != events.ResultLive || !needsMigration(plan) {
		t.Fatalf("plan of the running VM: %+v, %v; want a live move a migration carries", plan, err)
	}
	for i, c := range vmi.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceIsMigratable {
			vmi.Status.Conditions[i].Status, vmi.Status.Conditions[i].Reason = corev1.ConditionFalse, virtv1.VirtualMachineInstanceReasonDisksNotMigratable
		}
	}
	if _, err := vmis.Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to see the VMI not migratable", func() bool {
		return !instancetype.Migratable(a.cfg.Fleet.VMI("ns", "a"))
	})
	out, err := a.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Wrote || needsMigration(events.Plan{Action: out.Result, Changes: out.Changes}) || !strings.Contains(out.Reason, "decided again at the move (planned live") {
		t.Fatalf("outcome %+v; want a move no migration carries, decided again", out)
	}
}

func testStartedSincePlanned(t *testing.T) {
	a, clients, plan := fixture(t)
	ctx := t.Context()
	if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Create(ctx, testenv.RunningVMI("ns", "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to see the VMI", func() bool { return a.cfg.Fleet.VMI("ns", "a") != nil })
	out, err := a.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != events.ResultLive || !out.Wrote || !strings.Contains(out.Reason, "decided again at the move (planned next-boot") || !needsMigration(events.Plan{Action: out.Result, Changes: out.Changes}) {
		t.Fatalf("outcome %+v; want a live move a migration carries, decided again", out)
	}
}
