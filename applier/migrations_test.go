package applier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/telemetry"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// budgetFleet is a MigrationFleet of VMs and VMIs by name.
type budgetFleet struct {
	vms  map[string]*virtv1.VirtualMachine
	vmis map[string]*virtv1.VirtualMachineInstance
	kv   *virtv1.KubeVirt
	// migs are the migration objects, by UID.
	migs map[string]*virtv1.VirtualMachineInstanceMigration
}

func (f *budgetFleet) VM(_, name string) *virtv1.VirtualMachine { return f.vms[name] }
func (f *budgetFleet) VMI(_, name string) *virtv1.VirtualMachineInstance {
	return f.vmis[name]
}
func (f *budgetFleet) KubeVirt() *virtv1.KubeVirt                   { return f.kv }
func (f *budgetFleet) VMIInformer() cache.SharedIndexInformer       { return nil }
func (f *budgetFleet) KubeVirtInformer() cache.SharedIndexInformer  { return nil }
func (f *budgetFleet) MigrationInformer() cache.SharedIndexInformer { return nil }
func (f *budgetFleet) Migration(_, uid string) *virtv1.VirtualMachineInstanceMigration {
	return f.migs[uid]
}

// budgetApplier is an applier on a test JetStream with fleet's migration
// budget, cfg's queue timeout and clock, and the bus bucket its slots are
// kept in.
func budgetApplier(t *testing.T, fleet *budgetFleet, cfg Config) (*Applier, jetstream.KeyValue) {
	t.Helper()
	js := testenv.JetStream(t)
	kv, err := js.KeyValue(t.Context(), events.BucketBus)
	if err != nil {
		t.Fatal(err)
	}
	clients := testenv.FakeClients(nil)
	cfg.Clients, cfg.Fleet, cfg.JetStream = clients, testenv.StartCache(t, clients), js
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.budget = newBudget(kv, fleet)
	return a, kv
}

// waitingFleet is a budget fleet of running VMs named names, each VMI's
// CPU hot-plug waiting for its migration when waiting says so.
func waitingFleet(waiting bool, names ...string) *budgetFleet {
	fleet := &budgetFleet{vms: map[string]*virtv1.VirtualMachine{}, vmis: map[string]*virtv1.VirtualMachineInstance{}}
	hot := virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue}
	for _, n := range names {
		fleet.vms[n] = &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n, UID: types.UID("uid-" + n)}}
		vmi := testenv.RunningVMI("ns", n)
		if waiting {
			vmi.Status.Conditions = append(vmi.Status.Conditions, hot)
		}
		fleet.vmis[n] = vmi
	}
	return fleet
}

// steered gives a its rollout control store and a watch of it.
func steered(t *testing.T, a *Applier) *rollout.Store {
	t.Helper()
	store, err := rollout.Open(t.Context(), a.cfg.JetStream)
	if err != nil {
		t.Fatal(err)
	}
	a.control = store
	if a.watch, err = store.StartWatch(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return store
}

// livePlan is the live plan of event for VM ns/name.
func livePlan(event, name string) events.Plan {
	return events.Plan{EventID: event, VM: events.VMRef{Namespace: "ns", Name: name, UID: "uid-" + name}, Action: events.ResultLive}
}

// TestTheMigrationBudgetHoldsLiveMovesToItsSlots: with a budget of two, a
// third live move finds no slot until one VM's migration ended; a VM whose
// hot-plug waits for its migration keeps its slot, and so does one whose
// migration ended before it was moved again; a failed migration pauses the
// rollout once.
func TestTheMigrationBudgetHoldsLiveMovesToItsSlots(t *testing.T) {
	ctx := t.Context()
	fleet := &budgetFleet{vms: map[string]*virtv1.VirtualMachine{}, vmis: map[string]*virtv1.VirtualMachineInstance{}}
	old := metav1.NewTime(time.Now().Add(-time.Hour))
	for _, n := range []string{"a", "b", "c"} {
		fleet.vms[n] = &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n, UID: types.UID("uid-" + n)}}
		vmi := testenv.RunningVMI("ns", n)
		vmi.CreationTimestamp = old
		// Its last migration ended an hour ago, before any move here.
		vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "old-" + types.UID(n), StartTimestamp: &old, EndTimestamp: &old, Completed: true}
		fleet.vmis[n] = vmi
	}
	a, _ := budgetApplier(t, fleet, Config{QueueTimeout: time.Hour})
	store, err := rollout.Open(ctx, a.cfg.JetStream)
	if err != nil {
		t.Fatal(err)
	}
	a.control = store
	plan := func(n string) events.Plan {
		return events.Plan{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: n, UID: "uid-" + n}, Action: events.ResultLive}
	}
	take := func(n string) bool {
		took, err := a.tryTake(ctx, plan(n), 2)
		if err != nil {
			t.Fatal(err)
		}
		return took != nil
	}
	if !take("a") || !take("b") {
		t.Fatal("a and b found no slot in an empty budget of two")
	}
	if take("c") {
		t.Fatal("c took a third slot of a budget of two")
	}
	// a's hot-plug waits on its VMI for KubeVirt's migration: it keeps its slot.
	hot := virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue}
	fleet.vmis["a"].Status.Conditions = append(fleet.vmis["a"].Status.Conditions, hot)
	if take("c") {
		t.Fatal("c took the slot of a, whose migration has not started")
	}
	// b's migration runs: its slot says so, for rollout status.
	started, ended := metav1.Now(), metav1.NewTime(time.Now().Add(time.Second))
	fleet.vmis["b"].Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-b", StartTimestamp: &started}
	if take("c") {
		t.Fatal("c took the slot of b, whose migration runs")
	}
	migrating := 0
	slots, err := a.budget.slots(ctx)
	for _, s := range slots {
		if s.MS.Migrating != nil && s.MS.VM.Name == "b" {
			migrating++
		}
	}
	if err != nil || migrating != 1 {
		t.Fatalf("slots %+v, %v; want b's marked migrating", slots, err)
	}
	// b's migration ends: its slot is c's.
	fleet.vmis["b"].Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-b", StartTimestamp: &started, EndTimestamp: &ended, Completed: true}
	if !take("c") {
		t.Fatal("c found no slot once b's migration ended")
	}
	// a's migration fails: its rollout is paused, once, and a's slot is
	// freed (KubeVirt migrates it again, but the rollout's decision is the
	// operator's now: issue 59, item 6), so b takes it.
	fleet.vmis["a"].Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-a", StartTimestamp: &started, EndTimestamp: &ended, Completed: true, Failed: true, FailureReason: "did not converge"}
	if !take("b") {
		t.Fatal("b found no slot once a's migration failed and its rollout was paused")
	}
	c, _, err := store.Get(ctx, "E")
	if err != nil || c.State != events.StatePaused || !strings.Contains(c.Reason, "m-a of ns/a failed: did not converge") {
		t.Fatalf("rollout E: %+v, %v; want paused by a's failed migration", c, err)
	}
	if _, _, err := store.Apply(ctx, "E", events.ActionResume, "", "alice", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if take("a") {
		t.Fatal("a took a third slot of a budget of two")
	}
	if c, _, _ := store.Get(ctx, "E"); c.State != events.StateRunning {
		t.Errorf("rollout E paused again for the failure it was paused for: %+v", c)
	}
	slots, err = a.budget.slots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var holders []string
	for _, s := range slots {
		holders = append(holders, s.MS.VM.Name)
	}
	if slices.Sort(holders); !slices.Equal(holders, []string{"b", "c"}) {
		t.Errorf("slots held by %v; want b's and c's", holders)
	}
}

// TestAVMIStartedInItsMovesSecondKeepsItsSlot: a VM whose VMI was
// created in the whole second its slot was taken (creation times are
// whole seconds) keeps the slot until its migration comes, and so does
// one whose VMI the cache showed late (another UID, created before the
// move); the slot is freed once the VM runs a VMI created since. Freed at
// once, as it was, a fleet just started ran past the budget (five moves
// at once against two, on KubeVirt's own virt-controller). A slot that
// names no VMI (an older kvlive's) still goes by the creation time.
func TestAVMIStartedInItsMovesSecondKeepsItsSlot(t *testing.T) {
	ctx := t.Context()
	second := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(second.Add(600 * time.Millisecond)) // the slot taken 0.6 s into the VMI's second
	running := func(uid types.UID, created time.Time) *virtv1.VirtualMachineInstance {
		vmi := testenv.RunningVMI("ns", "a")
		vmi.UID, vmi.CreationTimestamp = uid, metav1.NewTime(created)
		return vmi
	}
	fleet := &budgetFleet{
		vms: map[string]*virtv1.VirtualMachine{
			"a": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a"}},
			"b": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "uid-b"}},
		},
		vmis: map[string]*virtv1.VirtualMachineInstance{"a": running("vmi-1", second)},
	}
	a, kv := budgetApplier(t, fleet, Config{Clock: clk, QueueTimeout: time.Hour})
	plan := events.Plan{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "a", UID: "uid-a"}, Action: events.ResultLive}
	if took, err := a.tryTake(ctx, plan, 2); err != nil || took == nil || !*took {
		t.Fatalf("took %v, %v; want the empty budget's slot", took, err)
	}
	held := func() []slot { t.Helper(); return stillHeld(t, a) }
	if s := held(); len(s) != 1 || s[0].MS.VMI != "vmi-1" {
		t.Fatalf("slots %+v; want a's, naming its VMI vmi-1, held while its migration has not come", s)
	}
	fleet.vmis["a"] = running("vmi-0", second.Add(-time.Hour))
	if s := held(); len(s) != 1 {
		t.Fatalf("slots %+v; want a's held: the VMI the cache shows now ran before the move", s)
	}
	fleet.vmis["a"] = running("vmi-2", second.Add(5*time.Second))
	if s := held(); len(s) != 0 {
		t.Fatalf("slots %+v; want a's freed once it runs a VMI created since", s)
	}
	// An older kvlive's slot names no VMI: a VMI created in the slot's
	// second is taken for new, as before.
	fleet.vmis["b"] = testenv.RunningVMI("ns", "b")
	fleet.vmis["b"].CreationTimestamp = metav1.NewTime(second)
	if _, err := kv.Create(ctx, events.MigrationSlotKey(0), []byte(`{"eventId":"E","vm":{"namespace":"ns","name":"b","uid":"uid-b"},"at":"2026-12-06T12:00:00.6Z"}`)); err != nil {
		t.Fatal(err)
	}
	if s := held(); len(s) != 0 {
		t.Fatalf("slots %+v; want b's, naming no VMI, freed by the creation time", s)
	}
	if left, err := a.budget.slots(ctx); err != nil || len(left) != 0 {
		t.Errorf("slots left in the bucket %+v, %v; want none", left, err)
	}
}

// TestALiveMoveWaitsForKubeVirtNoLongerThanTheQueueTimeout: while the
// KubeVirt CR is not Deployed no slot is taken, rollout status is told
// why, and the wait ends at the queue timeout with an error saying so.
func TestALiveMoveWaitsForKubeVirtNoLongerThanTheQueueTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	fleet := &budgetFleet{kv: &virtv1.KubeVirt{Status: virtv1.KubeVirtStatus{Phase: virtv1.KubeVirtPhaseDeploying}}}
	a, kv := budgetApplier(t, fleet, Config{QueueTimeout: 500 * time.Millisecond})
	_, err := a.takeSlot(ctx, events.Plan{EventID: "E", VM: events.VMRef{Namespace: "ns", Name: "a", UID: "uid-a"}, Action: events.ResultLive}, 0)
	if !errors.Is(err, errTransient) || !strings.Contains(err.Error(), "--migration-queue-timeout") {
		t.Fatalf("takeSlot: %v; want a transient error naming the queue timeout", err)
	}
	if e, err := kv.Get(ctx, events.MigrationWaitKey); err != nil || !strings.Contains(string(e.Value()), "Deploying") {
		t.Errorf("the wait key: %v; want why live moves wait", err)
	}
	if slots, err := a.budget.slots(ctx); err != nil || len(slots) != 0 {
		t.Errorf("slots %v, %v; want none taken while KubeVirt is not deployed", slots, err)
	}
}

// TestAFreedSlotWakesTheWaitingMoves: the bucket's watch tells the budget
// of a slot freed by any replica, which wakes the moves waiting for one at
// once, not at their next look.
func TestAFreedSlotWakesTheWaitingMoves(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	kv, err := js.KeyValue(ctx, events.BucketBus)
	if err != nil {
		t.Fatal(err)
	}
	b := newBudget(kv, &budgetFleet{})
	if err := b.follow(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, events.MigrationSlotKey(0), []byte(`{"eventId":"E","vm":{"namespace":"ns","name":"a","uid":"1"}}`)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the holder known from the watch", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.holders[events.MigrationSlotKey(0)] == "ns/a"
	})
	room := b.roomChanged()
	if err := kv.Delete(ctx, events.MigrationSlotKey(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-room:
	case <-time.After(30 * time.Second): // a wake comes or never does: this only bounds the test
		t.Fatal("no wake after the slot's delete")
	}
}

// gate is a rate limiter that lets a move through once opened.
type gate chan struct{}

func (g gate) Wait(ctx context.Context) error {
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestASlotIsTakenAtTheWriteNotBeforeTheRatesWait: a live move waiting
// its turn under --rate holds no slot of the migration budget (another
// move may take it meanwhile); it takes one when its turn comes, right
// before the write, so KubeVirt's reaction is timed from the move. A move
// whose rollout was paused while it waited takes its slot and gives it
// back. Issue 59, item 4: a slot taken before a long wait was freed as
// "KubeVirt asked for no migration" before its VM moved.
func TestASlotIsTakenAtTheWriteNotBeforeTheRatesWait(t *testing.T) {
	ctx := t.Context()
	a, _ := budgetApplier(t, waitingFleet(false, "a", "b"), Config{QueueTimeout: time.Hour})
	store := steered(t, a)
	turnGate := make(gate)
	a.limiter = turnGate
	live := func(n string) events.Plan {
		p := livePlan("E", n)
		p.Changes = []events.Change{{Field: "cpu.sockets", From: "2", To: "3", Class: "live"}}
		return p
	}
	held := func() []string {
		slots, err := a.budget.slots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var vms []string
		for _, s := range slots {
			vms = append(vms, s.MS.VM.Name)
		}
		return vms
	}
	ta := &turn{budget: 1}
	done := make(chan error, 1)
	go func() { plan := live("a"); done <- a.takeTurn(withTurn(ctx, ta), &plan, nil) }()
	time.Sleep(200 * time.Millisecond) // a waits its turn
	if vms := held(); len(vms) != 0 {
		t.Fatalf("slots held by %v while a waits its turn; want none", vms)
	}
	opened := time.Now()
	turnGate <- struct{}{}
	if err := <-done; err != nil || !ta.tookSlot {
		t.Fatalf("a's turn: %v, took a slot %t", err, ta.tookSlot)
	}
	slots, _ := a.budget.slots(ctx)
	if len(slots) != 1 || slots[0].MS.VM.Name != "a" || slots[0].MS.At.Before(opened.Add(-time.Millisecond)) {
		t.Fatalf("slots %+v; want a's, taken once its turn came (%s)", slots, opened)
	}
	a.giveBack(ctx, live("a"))

	// b waits its turn; the rollout is paused meanwhile: b takes no slot
	// that outlives its turn.
	tb := &turn{budget: 1}
	go func() { plan := live("b"); done <- a.takeTurn(withTurn(ctx, tb), &plan, nil) }()
	if _, _, err := store.Apply(ctx, "E", events.ActionPause, "look first", "alice", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the pause seen", func() bool { return a.watch.Of("E").State == events.StatePaused })
	turnGate <- struct{}{}
	if err := <-done; !errors.Is(err, errSteered) || tb.tookSlot {
		t.Fatalf("b's turn in a paused rollout: %v, took a slot %t; want steered, no slot", err, tb.tookSlot)
	}
	if vms := held(); len(vms) != 0 {
		t.Errorf("slots held by %v after b's turn in a paused rollout; want none", vms)
	}
}

// TestASlotDoesNotOutliveItsRolloutsDecision: an abort frees every slot
// its rollout holds, and so does a settled rollout; a slot marked failed
// (a crash came after the mark) is finished by the next look: the rollout
// paused if nothing steered it since the mark, the slot freed either way;
// giving a slot back frees the plan's rollout's slot of the VM, never
// another rollout's. Issue 59, items 6 and 10.
func TestASlotDoesNotOutliveItsRolloutsDecision(t *testing.T) {
	ctx := t.Context()
	a, kv := budgetApplier(t, waitingFleet(true, "a", "b", "c", "d"), Config{QueueTimeout: time.Hour})
	store := steered(t, a)
	plan := livePlan
	for _, p := range []events.Plan{plan("A", "a"), plan("A", "b"), plan("S", "c"), plan("F", "d")} {
		if took, err := a.tryTake(ctx, p, 5); err != nil || took == nil {
			t.Fatalf("take %s: %v", p.VM, err)
		}
	}
	holders := func() []string {
		slots, err := a.budget.slots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range slots {
			if !a.freeIfEnded(ctx, s) {
				out = append(out, s.MS.EventID+"/"+s.MS.VM.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := holders(); !slices.Equal(got, []string{"A/a", "A/b", "F/d", "S/c"}) {
		t.Fatalf("slots held by %v before anything was decided", got)
	}
	// A is aborted, S settles: their slots go.
	if _, _, err := store.Apply(ctx, "A", events.ActionAbort, "bad type", "alice", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	seen, _, _ := store.Get(ctx, "S")
	if ok, err := store.MarkSettled(ctx, "S", seen, time.Now()); err != nil || !ok {
		t.Fatalf("MarkSettled S: %v, %v", ok, err)
	}
	testenv.Eventually(t, 10*time.Second, "the abort and the settling seen", func() bool {
		return a.watch.Of("A").State == events.StateAborted && !a.watch.Of("S").Settled.IsZero()
	})
	if got := holders(); !slices.Equal(got, []string{"F/d"}) {
		t.Fatalf("slots held by %v after A's abort and S's settling; want F's alone", got)
	}
	// d's slot marked failed, then a crash: the next look pauses F and frees it.
	slots, _ := a.budget.slots(ctx)
	s := slots[0]
	s.MS.FailedMigration, s.MS.FailedAt = "m-d", time.Now().UTC()
	body, _ := json.Marshal(s.MS)
	if _, err := kv.Update(ctx, s.key, body, s.rev); err != nil {
		t.Fatal(err)
	}
	if got := holders(); len(got) != 0 {
		t.Fatalf("slots held by %v after the look that finishes d's failure", got)
	}
	if c, _, _ := store.Get(ctx, "F"); c.State != events.StatePaused || !strings.Contains(c.Reason, "m-d of ns/d failed") {
		t.Errorf("rollout F: %+v; want paused for d's failed migration", c)
	}
	// A slot given back is the plan's rollout's alone.
	if took, err := a.tryTake(ctx, plan("G", "d"), 5); err != nil || took == nil {
		t.Fatalf("take d for G: %v", err)
	}
	a.giveBack(ctx, plan("H", "d"))
	if slots, _ := a.budget.slots(ctx); len(slots) != 1 || slots[0].MS.EventID != "G" {
		t.Errorf("slots %+v after H gave d's back; want G's kept", slots)
	}
}

// TestTheBudgetHoldsUnderAnyInterleavingOfTakes (issue 59, item 5): with a
// slot held at a key past the budget (taken under another rollout's larger
// budget, or before the KubeVirt CR lowered parallelMigrationsPerCluster),
// two replicas of eight workers each take slots for sixteen VMs at once
// under a budget of two. Each take read the count before its create and
// the create guarded one key, so two takers could both keep theirs: three
// slots in use of two. The slots in use never pass the budget, and the
// moves that kept a slot are as many as it had room for.
func TestTheBudgetHoldsUnderAnyInterleavingOfTakes(t *testing.T) {
	ctx := t.Context()
	names := []string{"held"}
	for i := range 16 {
		names = append(names, fmt.Sprintf("vm-%02d", i))
	}
	for round := range 5 {
		fleet := waitingFleet(true, names...)
		a, kv := budgetApplier(t, fleet, Config{QueueTimeout: time.Hour})
		b, err := New(a.cfg)
		if err != nil {
			t.Fatal(err)
		}
		b.budget = newBudget(kv, fleet)
		held, _ := json.Marshal(events.MigrationSlot{EventID: "OTHER", VM: livePlan("OTHER", "held").VM, At: time.Now().UTC()})
		if _, err := kv.Create(ctx, events.MigrationSlotKey(3), held); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var kept atomic.Int32
		for i, name := range names[1:] {
			replica := a
			if i%2 == 1 {
				replica = b
			}
			wg.Go(func() {
				took, err := replica.tryTake(ctx, livePlan("E", name), 2)
				if err != nil {
					t.Error(err)
				}
				if took != nil && *took {
					kept.Add(1)
				}
			})
		}
		wg.Wait()
		slots, err := a.budget.slots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var holders []string
		for _, s := range slots {
			holders = append(holders, s.MS.VM.Name)
		}
		if len(slots) > 2 || kept.Load() != 1 {
			t.Fatalf("round %d: %d slots in use of a budget of two, held by %v; %d takes kept theirs, want 1", round, len(slots), holders, kept.Load())
		}
	}
}

// TestASlotWithoutAHotplugIsKeptForSlotReactions: a moved VM whose VMI
// shows no hot-plug keeps its slot for Config.SlotReactions after the
// take (DefaultSlotReactions when zero), then the slot is freed: KubeVirt
// asked for no migration.
func TestASlotWithoutAHotplugIsKeptForSlotReactions(t *testing.T) {
	for _, tc := range []struct {
		reactions, want time.Duration
	}{{0, DefaultSlotReactions}, {2 * time.Second, 2 * time.Second}} {
		t.Run(tc.want.String(), func(t *testing.T) {
			ctx := t.Context()
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
			a, _ := budgetApplier(t, waitingFleet(false, "a"), Config{Clock: clk, QueueTimeout: time.Hour, SlotReactions: tc.reactions})
			if took, err := a.tryTake(ctx, livePlan("E", "a"), 1); err != nil || took == nil || !*took {
				t.Fatalf("took %v, %v; want the empty budget's slot", took, err)
			}
			held := func() int { t.Helper(); return len(stillHeld(t, a)) }
			clk.Step(tc.want - 100*time.Millisecond)
			if n := held(); n != 1 {
				t.Fatalf("%d slots held %v after the take; want a's, KubeVirt's reaction still awaited", n, tc.want-100*time.Millisecond)
			}
			clk.Step(200 * time.Millisecond)
			if n := held(); n != 0 {
				t.Errorf("%d slots held %v after the take with no hot-plug; want a's freed", n, tc.want+100*time.Millisecond)
			}
		})
	}
}

// TestASlotIsHeldUntilKubeVirtCountsItsMigrationEnded: a VMI that shows
// its migration ended frees its slot only once the migration's object is
// final, as KubeVirt counts the migrations it runs (every object not
// final); one the fleet does not hold frees it at the VMI's word, and so
// does one still not final SlotReactions after the end (issue 59, item
// 11).
func TestASlotIsHeldUntilKubeVirtCountsItsMigrationEnded(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	fleet := waitingFleet(false, "a", "b")
	metrics := telemetry.New()
	a, _ := budgetApplier(t, fleet, Config{Clock: clk, QueueTimeout: time.Hour, Metrics: metrics})
	for _, n := range []string{"a", "b"} {
		if took, err := a.tryTake(ctx, livePlan("E", n), 2); err != nil || took == nil || !*took {
			t.Fatalf("take %s: %v, %v", n, took, err)
		}
	}
	clk.Step(time.Second)
	started, ended := metav1.NewTime(clk.Now()), metav1.NewTime(clk.Now().Add(100*time.Millisecond))
	for _, n := range []string{"a", "b"} {
		fleet.vmis[n].Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: types.UID("m-" + n),
			StartTimestamp: &started, EndTimestamp: &ended, Completed: true}
	}
	fleet.migs = map[string]*virtv1.VirtualMachineInstanceMigration{
		"m-a": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kubevirt-workload-update-a", UID: "m-a"},
			Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "a"}, Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationRunning}},
	}
	held := func() []string {
		t.Helper()
		var vms []string
		for _, s := range stillHeld(t, a) {
			vms = append(vms, s.MS.VM.Name)
		}
		return vms
	}
	if vms := held(); !slices.Equal(vms, []string{"a"}) {
		t.Fatalf("slots held by %v; want a's alone: its migration's object is not final, b's is not held", vms)
	}
	fleet.migs["m-a"].Status.Phase = virtv1.MigrationSucceeded
	if vms := held(); len(vms) != 0 {
		t.Fatalf("slots held by %v; want none once a's migration object is final", vms)
	}

	// An object that stays not final past SlotReactions is KubeVirt's to
	// finish: the slot goes.
	if took, err := a.tryTake(ctx, livePlan("F", "a"), 2); err != nil || took == nil || !*took {
		t.Fatalf("take a again: %v, %v", took, err)
	}
	clk.Step(time.Second)
	started2, ended2 := metav1.NewTime(clk.Now()), metav1.NewTime(clk.Now())
	fleet.vmis["a"].Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-a2",
		StartTimestamp: &started2, EndTimestamp: &ended2, Completed: true}
	fleet.migs["m-a2"] = &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m2", UID: "m-a2"},
		Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationRunning}}
	if vms := held(); !slices.Equal(vms, []string{"a"}) {
		t.Fatalf("slots held by %v; want a's, its new migration's object not final", vms)
	}
	clk.Step(DefaultSlotReactions + time.Second)
	if vms := held(); len(vms) != 0 {
		t.Errorf("slots held by %v; want a's freed: its migration object still not final %v after its end", vms, DefaultSlotReactions)
	}
	if n := counter(t, metrics, "kvlive_migration_slots_freed_not_final_total"); n != 1 {
		t.Errorf("kvlive_migration_slots_freed_not_final_total = %v, want 1", n)
	}
}

// counter reads the counter name from m.
func counter(t *testing.T, m *telemetry.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// stillHeld looks at every slot of a's budget as the sweep does, freeing
// those whose VM needs them no more, and returns the rest.
func stillHeld(t *testing.T, a *Applier) []slot {
	t.Helper()
	slots, err := a.budget.slots(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []slot
	for _, s := range slots {
		if !a.freeIfEnded(t.Context(), s) {
			out = append(out, s)
		}
	}
	return out
}
