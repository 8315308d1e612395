package applier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
)

// The migration budget paces live moves by KubeVirt's migration capacity.
// In KubeVirt v1.9 a running VM's hot-plug reaches the guest only by a
// live migration, at most parallelMigrationsPerCluster (5) at once, so a
// rollout that moves a whole batch's pins at once commits every VM of it
// to a migration long before the first one ends, or fails. The applier
// instead keeps the running VMs it moved whose migration has not ended
// within a budget: a live move takes one of the budget's slots (a KV
// create in events.BucketBus, shared by every replica) before the
// pin moves, and the slot is given back once KubeVirt's migration of the
// VM ended (or the VM can no longer migrate, stopped, or went). A failed
// migration pauses (or, by the policy, aborts) its rollout, so a bad
// instance type commits at most the budget's VMs. Next-boot and restart
// moves take no slot.

// MigrationFleet is what the budget reads of the cluster: each VM's VMI
// and the KubeVirt CR (its migration settings and deployment state), and
// the informers that tell when they change (nil: looked at on a timer).
type MigrationFleet interface {
	VM(namespace, name string) *virtv1.VirtualMachine
	VMI(namespace, name string) *virtv1.VirtualMachineInstance
	KubeVirt() *virtv1.KubeVirt
	VMIInformer() cache.SharedIndexInformer
	KubeVirtInformer() cache.SharedIndexInformer
	// Migration is the VirtualMachineInstanceMigration of namespace with
	// uid, nil when the fleet holds none (or watches none:
	// MigrationInformer nil).
	Migration(namespace, uid string) *virtv1.VirtualMachineInstanceMigration
	MigrationInformer() cache.SharedIndexInformer
}

// defaultParallelMigrations is KubeVirt's parallelMigrationsPerCluster
// when the CR sets none.
const defaultParallelMigrations = 5

// Budget pacing timing. Waiting moves and the sweep act on events (a slot
// freed in the bucket, a VMI holding a slot or the KubeVirt CR changed);
// slotRecheck bounds how long either goes without looking (what no event
// tells: a rollout paused, a slot past its time).
const slotRecheck = 5 * time.Second

// DefaultSlotReactions is how long after its move a VM that shows no
// hot-plug yet keeps its slot (Config.SlotReactions).
const DefaultSlotReactions = 30 * time.Second

// budget is the applier's view of the migration budget.
type budget struct {
	kv    jetstream.KeyValue
	fleet MigrationFleet

	mu sync.Mutex
	// room is closed (and replaced) when a slot may have come free: a slot
	// deleted from the bucket, or the KubeVirt CR changed.
	room chan struct{}
	// holders are the VMs ("namespace/name") holding slots, by slot key, as
	// the bucket's watch last told; look is poked when one's VMI changes.
	holders map[string]string
	look    chan struct{}
}

func newBudget(kv jetstream.KeyValue, fleet MigrationFleet) *budget {
	return &budget{kv: kv, fleet: fleet, room: make(chan struct{}), holders: map[string]string{}, look: make(chan struct{}, 1)}
}

// roomChanged is closed once the budget may have room; take it before
// looking at the slots, so no freeing between the look and the wait is
// missed.
func (b *budget) roomChanged() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.room
}

// wake tells the moves waiting for a slot to look again.
func (b *budget) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.room)
	b.room = make(chan struct{})
}

// poke asks the sweep to look at the slots now.
func (b *budget) poke() {
	select {
	case b.look <- struct{}{}:
	default: // a look is due already
	}
}

// follow keeps the budget told of what frees a slot until ctx ends: the
// bucket's slot keys (a delete wakes waiting moves), the VMIs of the VMs
// holding slots (their migration's end pokes the sweep) and the KubeVirt
// CR (deployed again, or a new parallelMigrationsPerCluster).
func (b *budget) follow(ctx context.Context, log *slog.Logger) error {
	w, err := b.kv.Watch(ctx, events.MigrationKeys)
	if err != nil {
		return fmt.Errorf("watch %s: %w", events.MigrationKeys, err)
	}
	type handled struct {
		inf cache.SharedIndexInformer
		reg cache.ResourceEventHandlerRegistration
	}
	var regs []handled
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		on  func(any)
	}{{b.fleet.VMIInformer(), b.vmiChanged}, {b.fleet.KubeVirtInformer(), func(any) { b.wake() }},
		{b.fleet.MigrationInformer(), b.migrationChanged}} {
		if h.inf == nil {
			continue
		}
		reg, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    h.on,
			UpdateFunc: func(_, obj any) { h.on(obj) },
			DeleteFunc: h.on,
		})
		if err != nil {
			_ = w.Stop()
			return fmt.Errorf("informer handler: %w", err)
		}
		regs = append(regs, handled{h.inf, reg})
	}
	go func() {
		defer func() {
			_ = w.Stop()
			for _, r := range regs {
				_ = r.inf.RemoveEventHandler(r.reg)
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					if ctx.Err() == nil {
						log.Warn("applier: the migration budget's watch ended; waiting moves look again every " + slotRecheck.String())
					}
					return
				}
				if e != nil {
					b.slotChanged(e)
				}
			}
		}
	}()
	return nil
}

// slotChanged keeps holders current from the bucket's watch, and wakes the
// waiting moves when a slot is freed.
func (b *budget) slotChanged(e jetstream.KeyValueEntry) {
	if e.Key() == events.MigrationWaitKey {
		return
	}
	var ms events.MigrationSlot
	taken := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &ms) == nil
	b.mu.Lock()
	if taken {
		b.holders[e.Key()] = ms.VM.Namespace + "/" + ms.VM.Name
	} else {
		delete(b.holders, e.Key())
	}
	b.mu.Unlock()
	if !taken {
		b.wake()
	}
}

// held records the VMs holding slots, as a sweep read them.
func (b *budget) held(slots []slot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.holders)
	for _, s := range slots {
		b.holders[s.key] = s.MS.VM.Namespace + "/" + s.MS.VM.Name
	}
}

// vmiChanged pokes the sweep when the VMI of a VM holding a slot changed.
func (b *budget) vmiChanged(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	b.mu.Lock()
	holds := false
	for _, vm := range b.holders {
		if vm == key {
			holds = true
			break
		}
	}
	b.mu.Unlock()
	if holds {
		b.poke()
	}
}

// migrationChanged pokes the sweep when a migration of the VMI of a VM
// holding a slot changed: KubeVirt finalising it frees the slot.
func (b *budget) migrationChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(*virtv1.VirtualMachineInstanceMigration); ok {
		b.vmiChanged(cache.ExplicitKey(m.Namespace + "/" + m.Spec.VMIName))
	}
}

// size is the budget for a rollout's VM: KubeVirt's
// parallelMigrationsPerCluster, or the rollout policy's migrationBudget
// (kvlive run --migration-budget for events that name no policy) when
// lower. Every rollout's VMs share the slots: a rollout with a lower
// budget takes one only while fewer are in use.
func (b *budget) size(policy int) int {
	n := defaultParallelMigrations
	if kv := b.fleet.KubeVirt(); kv != nil {
		if m := kv.Spec.Configuration.MigrationConfiguration; m != nil && m.ParallelMigrationsPerCluster != nil {
			n = int(*m.ParallelMigrationsPerCluster)
		}
	}
	if policy > 0 && policy < n {
		n = policy
	}
	return max(n, 1)
}

// notDeployed says why KubeVirt's workload updater starts no migration
// now (the KubeVirt CR not fully deployed: an install or upgrade under
// way), or "".
func (b *budget) notDeployed() string {
	kv := b.fleet.KubeVirt()
	if kv == nil {
		return ""
	}
	switch {
	case kv.Status.Phase != virtv1.KubeVirtPhaseDeployed:
		return fmt.Sprintf("the KubeVirt CR is %q, not Deployed: KubeVirt starts no workload-update migration until it is", kv.Status.Phase)
	case kv.Status.ObservedDeploymentID != kv.Status.TargetDeploymentID:
		return "the KubeVirt CR is being updated (observed deployment differs from the target): KubeVirt starts no workload-update migration until it is done"
	}
	return ""
}

// needsMigration reports whether the plan's move reaches the guest only by
// a live migration: a live result with sockets or guest memory to hot-plug.
func needsMigration(plan events.Plan) bool {
	if plan.Action != events.ResultLive {
		return false
	}
	for _, c := range plan.Changes {
		if c.Class == instancetype.ClassLive && (c.Field == "cpu.sockets" || c.Field == "memory.guest") {
			return true
		}
	}
	return false
}

// slot is one slot as read from the bucket.
type slot struct {
	key string
	rev uint64
	MS  events.MigrationSlot
}

// slots reads the budget's slots in use, from the bucket's stream leader:
// a watch's first values, never a direct get a follower of a NATS cluster
// may answer from behind, since the budget's check (tryTake) must see
// every slot taken before its own.
func (b *budget) slots(ctx context.Context) ([]slot, error) {
	w, err := b.kv.Watch(ctx, events.MigrationKeys, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []slot
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("the watch of the migration budget ended before its first values")
			}
			if e == nil {
				return out, nil // the first values are all in
			}
			if e.Key() == events.MigrationWaitKey {
				continue
			}
			s := slot{key: e.Key(), rev: e.Revision()}
			if json.Unmarshal(e.Value(), &s.MS) != nil {
				continue
			}
			if s.MS.Taken == 0 {
				s.MS.Taken = s.rev // never updated: its revision is its create's
			}
			out = append(out, s)
		}
	}
}

// take waits for a slot for the plan's VM and returns whether this call
// took it (false: the VM held one already, from an earlier delivery). It
// waits while the KubeVirt CR is not deployed, and gives up when ctx ends
// or the rollout stops running (errSteered).
func (a *Applier) takeSlot(ctx context.Context, plan events.Plan, policy int) (bool, error) {
	b := a.budget
	waitingSince, began := time.Time{}, a.cfg.Clock.Now()
	for {
		if waited := a.cfg.Clock.Since(began); waited > a.cfg.QueueTimeout {
			// Every wait has its bound: the plan is retried, and dead-lettered
			// with this reason once its deliveries are spent.
			a.cfg.Metrics.MigrationWait("gave-up")
			a.cfg.Log.Warn("applier: a live move gave up waiting for the migration budget", "vm", plan.VM.String(), "event", plan.EventID, "waited", waited)
			return false, fmt.Errorf("%w: waited %v (--migration-queue-timeout) for a slot of the migration budget or for KubeVirt to be deployed", errTransient, waited.Round(time.Second))
		}
		room := b.roomChanged()
		if why := b.notDeployed(); why != "" {
			if waitingSince.IsZero() {
				waitingSince = a.cfg.Clock.Now()
				a.cfg.Log.Warn("applier: live moves wait for KubeVirt", "why", why)
				a.cfg.Metrics.MigrationWait("kubevirt-not-deployed")
				a.sayWait(ctx, why, waitingSince)
			}
		} else {
			if !waitingSince.IsZero() {
				a.clearWait(ctx)
				waitingSince = time.Time{}
			}
			took, err := a.tryTake(ctx, plan, b.size(policy))
			if err != nil || took != nil {
				return took != nil && *took, err
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-room:
		case <-time.After(slotRecheck):
		}
		if a.watch != nil && a.watch.Of(plan.EventID).State != events.StateRunning {
			return false, errSteered
		}
	}
}

// tryTake frees the slots whose migration ended and takes a free one for
// the plan's VM; nil means none is free.
func (a *Applier) tryTake(ctx context.Context, plan events.Plan, n int) (*bool, error) {
	slots, err := a.budget.slots(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration budget: %w", err)
	}
	used := map[string]bool{}
	for _, s := range slots {
		if a.freeIfEnded(ctx, s) {
			continue
		}
		if s.MS.VM.UID == plan.VM.UID && s.MS.EventID == plan.EventID {
			took := false
			return &took, nil // an earlier delivery of this plan holds it
		}
		used[s.key] = true
	}
	if len(used) >= n {
		return nil, nil
	}
	taken := events.MigrationSlot{EventID: plan.EventID, VM: plan.VM, At: a.cfg.Clock.Now().UTC()}
	if vmi := a.budget.fleet.VMI(plan.VM.Namespace, plan.VM.Name); vmi != nil {
		taken.VMI = string(vmi.UID)
		if vmi.Status.MigrationState != nil {
			taken.Prior = string(vmi.Status.MigrationState.MigrationUID)
		}
	}
	body, err := json.Marshal(taken)
	if err != nil {
		return nil, err
	}
	for i := range n {
		key := events.MigrationSlotKey(i)
		if used[key] {
			continue
		}
		rev, err := a.budget.kv.Create(ctx, key, body)
		if events.Conflict(err) {
			continue // another worker or replica took it first
		}
		if err != nil {
			return nil, fmt.Errorf("migration budget: take %s: %w", key, err)
		}
		return a.checkTake(ctx, plan, n, key, rev)
	}
	return nil, nil // other workers or replicas took the free ones first
}

// checkTake keeps the slot just created at key (bucket revision rev) only
// if fewer than n slots taken before it are still held. The count tryTake
// read came before its create, and the create's compare-and-set guards one
// key: two takers reading at once, or a slot held at a key past n (taken
// under a larger budget, another rollout's or before the KubeVirt CR
// lowered parallelMigrationsPerCluster), would let both keep theirs. Read
// again after the create, the slots' revisions order every take of every
// worker and replica, and each keeps its slot only where the order allows
// it; the later one gives its slot back and waits, so the budget holds
// under any interleaving. A slot's revision changes with its updates;
// Taken keeps the create's.
func (a *Applier) checkTake(ctx context.Context, plan events.Plan, n int, key string, rev uint64) (*bool, error) {
	slots, err := a.budget.slots(ctx)
	if err == nil {
		before := 0
		for _, s := range slots {
			if s.key != key && s.MS.Taken < rev {
				before++
			}
		}
		if before < n {
			took := true
			a.cfg.Metrics.MigrationSlots(before + 1)
			return &took, nil
		}
		a.cfg.Metrics.MigrationWait("raced")
		a.cfg.Log.Debug("applier: a slot of the migration budget taken at once with others given back",
			"vm", plan.VM.String(), "event", plan.EventID, "takenBefore", before, "budget", n)
	}
	// Given back, unless it changed meanwhile (the sweep frees nothing
	// taken this recently). With the budget unreadable, the slot cannot be
	// proven within it: given back too, and the move waits.
	if derr := a.budget.kv.Delete(ctx, key, jetstream.LastRevision(rev)); derr != nil && !events.Conflict(derr) {
		a.cfg.Log.Warn("applier: a slot of the migration budget could not be given back; the sweep frees it once the VM shows nothing to migrate",
			"vm", plan.VM.String(), "key", key, "err", derr)
	}
	if err != nil {
		return nil, fmt.Errorf("migration budget: check the slot taken: %w", err)
	}
	return nil, nil
}

// sweepSlots frees the slots whose migration ended, and acts on failed
// migrations, until ctx ends: when a VM holding a slot changes (its
// migrations end, and may fail, whether or not another live move comes),
// and every slotRecheck for what no event tells.
func (a *Applier) sweepSlots(ctx context.Context) {
	t := time.NewTicker(slotRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.budget.look:
		}
		slots, err := a.budget.slots(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.cfg.Log.Warn("applier: migration budget unreadable; looked at again", "err", err, "in", slotRecheck)
			}
			continue
		}
		var held []slot
		for _, s := range slots {
			if !a.freeIfEnded(ctx, s) {
				held = append(held, s)
			}
		}
		a.budget.held(held)
		a.cfg.Metrics.MigrationSlots(len(held))
	}
}

// giveBack frees the slot the plan's VM holds (a move that wrote nothing).
func (a *Applier) giveBack(ctx context.Context, plan events.Plan) {
	slots, err := a.budget.slots(ctx)
	if err != nil {
		a.cfg.Log.Warn("applier: migration budget unreadable; the slot is freed once the sweep sees the VM has nothing to migrate", "vm", plan.VM.String(), "err", err)
		return
	}
	for _, s := range slots {
		if s.MS.VM.UID == plan.VM.UID && s.MS.EventID == plan.EventID {
			a.free(ctx, s, "the move wrote nothing")
		}
	}
}

// freeIfEnded gives a slot back once its VM's migration ended, or can no
// longer come, acts on a failed one, and marks the slot of a VM whose
// migration runs; it reports whether it freed it.
func (a *Applier) freeIfEnded(ctx context.Context, s slot) bool {
	if s.MS.FailedMigration != "" {
		// Marked failed, and the slot not freed: a crash came between the
		// mark and the pause, or between the pause and the free.
		return a.stopForFailure(ctx, s, "")
	}
	why, m := a.slotState(s)
	if m.Failed {
		return a.migrationFailed(ctx, s, m)
	}
	if why == "" {
		if running := m.Running && m.Started != nil; running != (s.MS.Migrating != nil) {
			a.markMigrating(ctx, s, m.Started)
		}
		return false
	}
	a.free(ctx, s, why)
	return true
}

// slotState says why a slot's VM needs it no more ("" while it does), and
// the VM's migration since the move, if one showed.
func (a *Applier) slotState(s slot) (string, instancetype.Migration) {
	if a.watch != nil {
		switch st := a.watch.Of(s.MS.EventID); {
		case st.State == events.StateAborted:
			return "its rollout was aborted", instancetype.Migration{}
		case !st.Settled.IsZero():
			return "its rollout settled", instancetype.Migration{}
		}
	}
	vm := a.budget.fleet.VM(s.MS.VM.Namespace, s.MS.VM.Name)
	if vm == nil || string(vm.UID) != s.MS.VM.UID {
		return "the VM is gone", instancetype.Migration{}
	}
	vmi := a.budget.fleet.VMI(s.MS.VM.Namespace, s.MS.VM.Name)
	since := s.MS.At.Add(-time.Second).Truncate(time.Second)
	switch {
	case vmi == nil || vmi.IsFinal():
		return "the VM stopped", instancetype.Migration{}
	case newVMI(s.MS, vmi, since):
		return fmt.Sprintf("the VM runs a new VMI (%s, created %s; the slot taken %s)", vmi.UID, vmi.CreationTimestamp.UTC().Format(time.RFC3339), s.MS.At.Format(time.RFC3339Nano)), instancetype.Migration{}
	case a.cfg.Clock.Since(s.MS.At) > a.cfg.QueueTimeout:
		a.cfg.Metrics.MigrationSlotGivenUp()
		a.cfg.Log.Warn("applier: a migration slot given up: no migration of its VM ended within --migration-queue-timeout", "vm", s.MS.VM.String(), "event", s.MS.EventID, "taken", s.MS.At)
		return fmt.Sprintf("no migration ended within the queue timeout %v: the slot is given up", a.cfg.QueueTimeout), instancetype.Migration{}
	}
	m := instancetype.MigrationSince(vmi, since)
	if m.UID != "" && m.UID == s.MS.Prior {
		m = instancetype.Migration{} // the one before the move
	}
	pending := len(instancetype.HotplugPending(vmi)) > 0
	switch {
	case m.Running:
		return "", m
	case pending && !instancetype.Migratable(vmi):
		return "the VMI cannot live-migrate: its change waits for a restart", m
	case pending:
		return "", m // waiting for KubeVirt's turn, or its retry after a failure
	case m.Succeeded && m.Ended != nil && a.stillCounted(s, m.UID, *m.Ended):
		return "", m // KubeVirt counts it running until its object is final
	case m.Succeeded:
		return "its migration ended", m
	case a.cfg.Clock.Since(s.MS.At) > a.cfg.SlotReactions:
		return "KubeVirt asked for no migration", m
	}
	return "", m
}

// stillCounted reports whether KubeVirt still counts the migration uid of
// the slot's VM, one the VMI shows ended (since then), among its running
// ones: its object (VirtualMachineInstanceMigration) is not final yet.
// virt-controller finalises it a moment after the VMI shows the end, and
// counts every migration object not final against
// parallelMigrationsPerCluster, so a slot freed at the VMI's word would
// open one more than the budget for that moment. A migration whose object
// the fleet does not hold (not watched, or deleted) is not counted; nor is
// one still not final SlotReactions after its end (logged and counted in
// kvlive_migration_slots_freed_not_final_total: it is KubeVirt's to
// finish).
func (a *Applier) stillCounted(s slot, uid string, since time.Time) bool {
	obj := a.budget.fleet.Migration(s.MS.VM.Namespace, uid)
	if obj == nil || obj.IsFinal() {
		return false
	}
	if a.cfg.Clock.Since(since) > a.cfg.SlotReactions {
		a.cfg.Metrics.MigrationSlotNotFinal()
		a.cfg.Log.Warn("applier: a migration the VMI shows ended is still not final; its slot is freed", "vm", s.MS.VM.String(),
			"migration", obj.Name, "phase", obj.Status.Phase, "ended", since)
		return false
	}
	return true
}

// newVMI reports whether vmi is not the VMI that ran when the slot was
// taken: another UID than the one the slot names, created no earlier than
// since (one created before it, which the cache had not shown when the
// slot was taken, is no new one). A slot that names none (no VMI ran then,
// or an older kvlive took it) goes by the creation time alone, which is
// whole seconds and so, read against since, takes a VMI created in the
// move's own second for a new one.
func newVMI(ms events.MigrationSlot, vmi *virtv1.VirtualMachineInstance, since time.Time) bool {
	if ms.VMI != "" {
		return string(vmi.UID) != ms.VMI && !vmi.CreationTimestamp.Time.Before(since)
	}
	return vmi.CreationTimestamp.After(since)
}

// markMigrating records on the slot that its VM's migration runs (started
// non-nil) or no longer does, for rollout status to tell migrating VMs
// from queued ones; a slot changed since it was read is left to the next
// look.
func (a *Applier) markMigrating(ctx context.Context, s slot, started *time.Time) {
	s.MS.Migrating = started
	if body, err := json.Marshal(s.MS); err == nil {
		_, _ = a.budget.kv.Update(ctx, s.key, body, s.rev)
	}
}

// free deletes the slot, unless it changed since it was read.
func (a *Applier) free(ctx context.Context, s slot, why string) {
	if err := a.budget.kv.Delete(ctx, s.key, jetstream.LastRevision(s.rev)); err != nil {
		return // changed or freed by another replica: read again next time
	}
	a.cfg.Log.Debug("applier: migration slot freed", "vm", s.MS.VM.String(), "event", s.MS.EventID, "why", why)
}

// migrationFailed pauses (or, by its policy, aborts) the rollout of a VM
// whose live migration failed, and frees the VM's slot: the decision is
// the operator's now, and KubeVirt's retries of that migration (after a
// backoff, until it succeeds or six hours pass) must not hold the budget
// of every rollout meanwhile. The slot is marked first (a compare-and-set:
// of replicas sweeping at once, one acts), so a crash before the free is
// finished by the next look (stopForFailure). It reports whether the slot
// was freed.
func (a *Applier) migrationFailed(ctx context.Context, s slot, m instancetype.Migration) bool {
	s.MS.FailedMigration, s.MS.FailedAt, s.MS.Migrating = m.UID, a.cfg.Clock.Now().UTC(), nil
	body, err := json.Marshal(s.MS)
	if err != nil {
		return false
	}
	rev, err := a.budget.kv.Update(ctx, s.key, body, s.rev)
	if err != nil {
		return false // another replica acts on it
	}
	s.rev = rev
	a.cfg.Metrics.MigrationFailed()
	a.cfg.Log.Warn("applier: a live migration failed; the rollout stops taking more VMs", "event", s.MS.EventID, "vm", s.MS.VM.String(),
		"migration", m.UID, "reason", m.FailureReason)
	return a.stopForFailure(ctx, s, m.FailureReason)
}

// stopForFailure pauses (or aborts) the rollout of a slot marked failed,
// unless its control record changed since the mark (the pause made before
// a crash, or an operator's step, which stands), and then frees the slot.
// why is the migration's failure reason, where known.
func (a *Applier) stopForFailure(ctx context.Context, s slot, why string) bool {
	if a.control != nil {
		c, _, err := a.control.Get(ctx, s.MS.EventID)
		if err != nil {
			a.cfg.Log.Warn("applier: could not read the rollout of a failed migration; looked at again", "event", s.MS.EventID, "err", err)
			return false
		}
		if c.State == events.StateRunning && c.At.Before(s.MS.FailedAt) {
			action := events.ActionPause
			if r, err := a.knownRollout(ctx, s.MS.EventID); err == nil && r.abortOnFailure {
				action = events.ActionAbort
			}
			reason := fmt.Sprintf("KubeVirt's live migration %s of %s failed", s.MS.FailedMigration, s.MS.VM)
			if why != "" {
				reason += ": " + why
			}
			if _, _, err := a.control.Apply(ctx, s.MS.EventID, action, reason, "kvlive applier", a.cfg.Clock.Now(), false); err != nil {
				a.cfg.Log.Warn("applier: could not stop the rollout after a failed migration; tried again", "event", s.MS.EventID, "err", err)
				return false
			}
		}
	}
	if a.stillCounted(s, s.MS.FailedMigration, s.MS.FailedAt) {
		return false // freed at a later look, once KubeVirt counts it ended
	}
	a.free(ctx, s, "its migration failed and its rollout was stopped")
	return true
}

// sayWait records why live moves wait, for rollout status.
func (a *Applier) sayWait(ctx context.Context, reason string, since time.Time) {
	body, err := json.Marshal(events.MigrationWait{Reason: reason, Since: since.UTC()})
	if err == nil {
		_, _ = a.budget.kv.Put(ctx, events.MigrationWaitKey, body)
	}
}

func (a *Applier) clearWait(ctx context.Context) {
	_ = a.budget.kv.Delete(ctx, events.MigrationWaitKey)
}
