package soak

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/applier"
	"kvlive/events"
	"kvlive/internal/standin"
	"kvlive/rollout"
)

// check lets the world settle and returns the promises it found broken:
//
//   - every VM a rollout planned has its outcome, or a dead letter that
//     says why it has none; and no dead letter lacks a reason;
//   - what kvlive says happened is what happened: on each VM, the pin
//     moves the API server carried out are, one for one, the outcomes
//     that say the VM moved (wrote, or found moved by an attempt cut
//     short), so no VM moved twice for one rollout and none moved
//     without its record;
//   - no rollout's VM moved after its abort, or while it was paused
//     (later than grace after the step returned, before its resume);
//   - no VM of a batched rollout moved before its batch was released,
//     and two promotes at once released one batch (see unreleased and
//     promotedOnce);
//   - never more live moves without an ended migration than the
//     migration budget, and none without a slot of it (see overBudget
//     and slotless);
//   - every notification told once (see toldOnce).
func (w *world) check() []string {
	progress, failed := w.settle()
	writes := w.api.log()
	dead, unexplained := w.deadLetters()
	failed = append(failed, unexplained...)

	type move struct{ vm, from, to string }
	recorded := map[move][]movedFor{} // the rollouts whose outcome says so
	for id, p := range progress {
		if testing.Verbose() {
			for _, o := range p.Outcomes {
				w.note("outcome %s %s: %s at %s attempt %d: %s", id, o.VM.Name, o.Result, o.FinishedAt.Format("15:04:05.000"), o.Attempt, o.Reason)
			}
		}
		missing := p.Planned - len(p.Outcomes)
		if missing > dead[id] {
			failed = append(failed, fmt.Sprintf("%s: %d VMs planned, %d outcomes and %d dead letters", id, p.Planned, len(p.Outcomes), dead[id]))
		}
		for _, o := range p.Outcomes {
			if o.Wrote || !o.MovedAfter.IsZero() {
				m := move{o.VM.Namespace + "/" + o.VM.Name, o.From, o.Revision}
				recorded[m] = append(recorded[m], movedFor{id, o.Batch})
			}
		}
	}
	carried := map[move][]write{}
	for _, wr := range writes {
		m := move{wr.vm, wr.from, wr.to}
		carried[m] = append(carried[m], wr)
	}
	for m, ws := range carried {
		by := recorded[m]
		if len(ws) != len(by) {
			failed = append(failed, fmt.Sprintf("%s moved %s → %s %d times; outcomes say so for %d rollouts %v; its outcomes:\n      %s",
				m.vm, m.from, m.to, len(ws), len(by), by, strings.Join(w.outcomesOf(m.vm), "\n      ")))
			continue
		}
		for i, wr := range ws {
			if why := w.outOfTurn(by[i].id, wr.at); why != "" {
				failed = append(failed, fmt.Sprintf("%s moved %s → %s at %s for %s, %s", m.vm, m.from, m.to, wr.at.Format("15:04:05.000"), by[i].id, why))
			}
			if why := w.unreleased(by[i], wr.at); why != "" {
				failed = append(failed, fmt.Sprintf("%s moved %s → %s at %s for %s, %s", m.vm, m.from, m.to, wr.at.Format("15:04:05.000"), by[i].id, why))
			}
		}
	}
	for m, by := range recorded {
		if len(carried[m]) == 0 {
			failed = append(failed, fmt.Sprintf("outcomes of %v say %s moved %s → %s; the API server carried out no such write", by, m.vm, m.from, m.to))
		}
	}
	failed = append(failed, w.promotedOnce()...)
	live := w.liveMoves(writes)
	failed = append(failed, w.overBudget(live)...)
	failed = append(failed, w.slotless(live)...)
	failed = append(failed, w.freedEarly(live)...)
	failed = append(failed, w.slotsLeft()...)
	failed = append(failed, w.toldOnce(progress)...)
	slices.Sort(failed)
	return failed
}

// slotsLeft names the migration slots still held once the world settled
// and slotsFreed passed: every VM's migration has ended by then (the
// stand-in's take at most a few hundred milliseconds, and fail once), or
// its VM stopped or went, so a slot left outlives what it holds the budget
// for (a failed migration's slot kept past its rollout's pause: issue 59,
// item 6). A slot whose VM KubeVirt gave no migration at all (its VMI
// booted with the move already in it) is freed slotNoMigration after its
// take, by design, so such a slot is waited for that long too.
func (w *world) slotsLeft() []string {
	var held []string
	ctx, cancel := context.WithTimeout(context.Background(), 2*slotsFreed+w.slotNoMigration())
	defer cancel()
	deadline := time.Now().Add(slotsFreed)
	for {
		held = held[:0]
		kv, err := w.js.KeyValue(ctx, events.BucketBus)
		if err != nil {
			return []string{fmt.Sprintf("the bus bucket: %v", err)}
		}
		keys, err := kv.ListKeysFiltered(ctx, events.MigrationKeys)
		if err != nil {
			return []string{fmt.Sprintf("listing migration slots: %v", err)}
		}
		wait := deadline
		for k := range keys.Keys() {
			if e, err := kv.Get(ctx, k); err == nil && k != events.MigrationWaitKey {
				held = append(held, fmt.Sprintf("%s: %s", k, e.Value()))
				var ms events.MigrationSlot
				if json.Unmarshal(e.Value(), &ms) == nil && ms.At.Add(w.slotNoMigration()).After(wait) {
					wait = ms.At.Add(w.slotNoMigration())
				}
			}
		}
		if len(held) == 0 || time.Now().After(wait) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var failed []string
	for _, h := range held {
		failed = append(failed, fmt.Sprintf("migration slot still held %v after the world settled: %s%s", slotsFreed, h, w.vmiState(h)))
	}
	return failed
}

// slotsFreed is how long after the world settled a migration slot may
// still be held: the applier's sweep looks again every 5 s without an
// event of the VM's.
const slotsFreed = 15 * time.Second

// slotNoMigration is when, after its take, the applier frees a slot whose
// VM KubeVirt asked no migration of (its SlotReactions), with a sweep
// (every 5 s) and a second to spare.
func (w *world) slotNoMigration() time.Duration {
	return cmp.Or(w.sc.slotReactions, applier.DefaultSlotReactions) + 6*time.Second
}

// liveMove is a pin write the stand-in answered with a hot-plug, and the
// migration that carried it (see liveMoves): when it started, when the VMI
// showed its end, and when its object went final (KubeVirt counts it
// until then).
type liveMove struct {
	write
	started, ended, final time.Time
}

// liveMoves are kvlive's live moves, by the write log and the stand-in's
// own records alone. A live move is a write the stand-in answered with a
// hot-plug: the latest write on the VM, before the hot-plug, to a
// revision among the pins the hot-plug answered. The move stays open from
// the write until the first migration of the VM started since the
// hot-plug ends (failed or not) and its object is final. A live move no
// migration ended is not listed.
func (w *world) liveMoves(writes []write) []liveMove {
	byVM := map[string][]write{}
	for _, wr := range writes {
		byVM[wr.vm] = append(byVM[wr.vm], wr)
	}
	history := w.standin.History()
	slices.SortFunc(history, func(a, b standin.MigrationRecord) int { return a.Started.Compare(b.Started) })
	var live []liveMove
	taken := map[write]bool{}
	for _, h := range w.standin.Hotplugs() {
		var by *write
		for i, wr := range byVM[h.VMI] {
			if wr.at.Before(h.At) && slices.Contains(strings.Split(h.Pins, ","), wr.to) {
				by = &byVM[h.VMI][i]
			}
		}
		if by == nil || taken[*by] {
			continue // no move of kvlive's, or one already counted
		}
		for _, m := range history {
			if m.VMI == h.VMI && !m.Started.Before(h.At) {
				taken[*by] = true
				live = append(live, liveMove{*by, m.Started, m.Ended, m.Final})
				break
			}
		}
	}
	return live
}

// overBudget names the live moves (liveMoves) made with more live moves
// open than the migration budget allowed. A live move no migration ended
// is not counted, so the count can only be short. The budget at a write
// is the KubeVirt CR's parallelMigrationsPerCluster, the higher one if it
// changed within grace before (kvlive reads it from its informer).
func (w *world) overBudget(live []liveMove) []string {
	var failed []string
	for _, m := range live {
		var open []string
		for _, o := range live {
			if o.write != m.write && !o.at.After(m.at) && o.final.After(m.at) {
				open = append(open, fmt.Sprintf("%s moved at %s, migrated %s–%s (final %s)", o.vm,
					o.at.Format("05.000"), o.started.Format("05.000"), o.ended.Format("05.000"), o.final.Format("05.000")))
			}
		}
		if budget := w.budgetAt(m.at); len(open)+1 > budget {
			slices.Sort(open)
			failed = append(failed, fmt.Sprintf("%s moved %s → %s live at %s with %d live moves open (%s): over the budget of %d; its outcomes:\n      %s",
				m.vm, m.from, m.to, m.at.Format("15:04:05.000"), len(open), strings.Join(open, "; "), budget, strings.Join(w.outcomesOf(m.vm), "\n      ")))
		}
	}
	return failed
}

// slotless names the live moves whose VM held no slot of the migration
// budget at the write, by the bus bucket's history of the slots: a slot
// is taken right before the write and kept until the VM's migration
// ended (issue 59, item 4: a slot taken before a long wait for the
// move's turn was freed before the write).
func (w *world) slotless(live []liveMove) []string {
	w.mu.Lock()
	slots := slices.Clone(w.slots)
	w.mu.Unlock()
	var failed []string
	for _, m := range live {
		holder := map[string]string{} // by slot key, at the write
		for _, e := range slots {
			if !e.at.After(m.at) {
				holder[e.key] = e.vm
			}
		}
		held := false
		for _, vm := range holder {
			held = held || vm == m.vm
		}
		if !held {
			failed = append(failed, fmt.Sprintf("%s moved %s → %s live at %s holding no migration slot (the slots then: %v); its outcomes:\n      %s",
				m.vm, m.from, m.to, m.at.Format("15:04:05.000"), holder, strings.Join(w.outcomesOf(m.vm), "\n      ")))
		}
	}
	return failed
}

// freedEarly names the live moves whose slot was freed before KubeVirt
// counted their migration ended: before its object went final (issue 59,
// item 11). Two frees are by design: of an object still not final past
// the slot's reactions time, and of every slot of an aborted rollout
// (item 6: the slot must not outlive that decision). The slot is the one
// the VM held at the write; freed is its next change to another VM or
// none.
func (w *world) freedEarly(live []liveMove) []string {
	w.mu.Lock()
	slots, controls := slices.Clone(w.slots), slices.Clone(w.controls)
	w.mu.Unlock()
	aborted := map[string]time.Time{} // by control key
	for _, c := range controls {
		if _, seen := aborted[c.id]; !seen && c.State == events.StateAborted {
			aborted[c.id] = c.at
		}
	}
	reactions := cmp.Or(w.sc.slotReactions, applier.DefaultSlotReactions)
	var failed []string
	for _, m := range live {
		if m.final.Sub(m.ended) > reactions {
			continue
		}
		key, id := "", ""
		for _, e := range slots {
			if !e.at.After(m.at) {
				if e.vm == m.vm {
					key, id = e.key, e.id
				} else if e.key == key {
					key = ""
				}
			}
		}
		if key == "" {
			continue // slotless says so
		}
		for _, e := range slots {
			if e.key == key && e.at.After(m.at) && e.vm != m.vm {
				if at, ok := aborted[events.ControlKey(id)]; e.at.Before(m.final) && (!ok || at.After(e.at)) {
					failed = append(failed, fmt.Sprintf("%s moved %s → %s live at %s: its slot %s freed at %s, before KubeVirt counted its migration ended (the VMI showed the end at %s, the object final at %s); its outcomes:\n      %s",
						m.vm, m.from, m.to, m.at.Format("15:04:05.000"), key, e.at.Format("15:04:05.000"), m.ended.Format("15:04:05.000"), m.final.Format("15:04:05.000"),
						strings.Join(w.outcomesOf(m.vm), "\n      ")))
				}
				break
			}
		}
	}
	return failed
}

// budgetAt is the highest migration budget the KubeVirt CR gave within
// grace before at.
func (w *world) budgetAt(at time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	budget := 0
	for i, b := range w.budgets {
		effective := i+1 == len(w.budgets) || w.budgets[i+1].at.After(at.Add(-grace))
		if !b.at.After(at) && effective {
			budget = max(budget, b.n)
		}
	}
	return budget
}

// outOfTurn says why a write at for rollout id came when it must not, or "".
func (w *world) outOfTurn(id string, at time.Time) string {
	for _, r := range w.rollouts() {
		if r.id != id {
			continue
		}
		if !r.aborted.IsZero() && at.After(r.aborted.Add(grace)) {
			return fmt.Sprintf("after its abort at %s", r.aborted.Format("15:04:05.000"))
		}
		for i, p := range r.paused {
			resumed := time.Time{}
			for _, q := range r.resumed {
				if q.After(p) {
					resumed = q
					break
				}
			}
			if at.After(p.Add(grace)) && (resumed.IsZero() || at.Before(resumed)) {
				return fmt.Sprintf("while paused (pause %d at %s)", i+1, p.Format("15:04:05.000"))
			}
		}
	}
	return ""
}

// movedFor is a rollout whose outcome says it moved a VM, and the batch
// the VM was in.
type movedFor struct {
	id    string
	batch int
}

// unreleased says why a write at for a VM of batch m.batch of rollout
// m.id came before its batch was released, or "": the control record
// names the last released batch, and the applier moves a batch's VMs
// only once the record released it (an abort sends the staged batches
// on to be skipped, which outOfTurn checks).
func (w *world) unreleased(m movedFor, at time.Time) string {
	if m.batch == 0 {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	released := 0
	for _, c := range w.controls {
		if c.id != m.id || c.at.After(at) {
			continue
		}
		if c.State == events.StateAborted {
			return ""
		}
		released = max(released, c.Batch)
	}
	if released >= m.batch {
		return ""
	}
	return fmt.Sprintf("a VM of batch %d while the control record had released batches up to %d", m.batch+1, released+1)
}

// promotedOnce names the pairs of promotes at once (promoteTwice) that
// released more than one batch between them, from the control record's
// history: each release by a promote names who promoted.
func (w *world) promotedOnce() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	last := map[string]int{}
	released := map[string][]int{} // by pair and rollout, the batches released
	for _, c := range w.controls {
		prev := last[c.id]
		last[c.id] = max(prev, c.Batch)
		by, ok := strings.CutPrefix(c.Gate, promotedBySoak)
		if !ok || c.Batch <= prev {
			continue
		}
		pair := strings.TrimRight(by, "ab") + " of " + c.id
		released[pair] = append(released[pair], c.Batch+1)
	}
	var failed []string
	for pair, batches := range released {
		if len(batches) > 1 {
			failed = append(failed, fmt.Sprintf("promotes %s at once released batches %v", pair, batches))
		}
	}
	return failed
}

// deadLetters counts the dead letters of each event, and names those
// without a reason.
func (w *world) deadLetters() (map[string]int, []string) {
	count := map[string]int{}
	var bad []string
	err := w.each(events.StreamDLQ, func(seq uint64, m *jetstream.RawStreamMsg) {
		var plan events.Plan
		if _, err := events.Decode(m.Data, events.TypePlan, &plan); err == nil {
			count[plan.EventID]++
		}
		if m.Header.Get(events.HeaderDeadReason) == "" {
			bad = append(bad, fmt.Sprintf("dead letter %d (%s) has no reason", seq, m.Subject))
		}
	})
	if err != nil {
		bad = append(bad, fmt.Sprintf("dead letters unreadable: %v", err))
	}
	return count, bad
}

// outcomesOf lists every outcome recorded for VM namespace/name, in the
// order recorded, for the report of a broken promise.
func (w *world) outcomesOf(vm string) []string {
	var out []string
	err := w.each(events.StreamOutcomes, func(_ uint64, m *jetstream.RawStreamMsg) {
		var o events.Outcome
		if _, err := events.Decode(m.Data, events.TypeOutcome, &o); err != nil || o.VM.Namespace+"/"+o.VM.Name != vm {
			return
		}
		out = append(out, fmt.Sprintf("%s %s: %s wrote=%v %s → %s movedAfter=%v attempt %d: %s %s", o.FinishedAt.Format("15:04:05.000"), o.EventID, o.Result, o.Wrote, o.From, o.Revision,
			!o.MovedAfter.IsZero(), o.Attempt, o.Reason, o.Error))
	})
	if err != nil {
		out = append(out, err.Error())
	}
	return out
}

// each calls do with every message of stream, in order (the soak's
// streams are small).
func (w *world) each(stream string, do func(uint64, *jetstream.RawStreamMsg)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := w.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		if m, err := s.GetMsg(ctx, seq); err == nil {
			do(seq, m)
		}
	}
	return nil
}

// toldOnce names the notifications that were not told once, waiting up to
// toldWithin for the replicas' notifiers to catch up with the settled
// world: the notifications stream stores each state change (kind and
// occurrence) of a rollout once; every planned rollout's start, every
// pause its control record kept (however short, lifted or not, whether a
// notifier ran) and, once its account says it ended, its end are stored;
// the receiver took each stored one and nothing else. A receiver may take
// one twice, with the same id, where a replica was cut off between its
// answer and the acknowledgement.
func (w *world) toldOnce(progress map[string]rollout.Progress) []string {
	deadline := time.Now().Add(toldWithin)
	for {
		failed := w.told1(progress)
		if len(failed) == 0 || time.Now().After(deadline) {
			return failed
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// toldWithin is how long after the world settled its notifications may
// still be on their way: the notifier looks every second, at a rollout
// with new outcomes only at most every second in the soak.
const toldWithin = 20 * time.Second

func (w *world) told1(progress map[string]rollout.Progress) []string {
	var failed []string
	stored := map[string]int{} // notification ids, by how many times stored
	err := w.each(events.StreamNotify, func(_ uint64, m *jetstream.RawStreamMsg) {
		stored[m.Header.Get(jetstream.MsgIDHeader)]++
	})
	if err != nil {
		return []string{fmt.Sprintf("the notifications stream: %v", err)}
	}
	for id, n := range stored {
		if n > 1 {
			failed = append(failed, fmt.Sprintf("notification %s stored %d times", id, n))
		}
	}
	want := func(eventID, kind, occurrence, what string) {
		if stored[events.NotifyID(eventID, kind, occurrence)] == 0 {
			failed = append(failed, fmt.Sprintf("%s: %s never told (no %s notification)", eventID, what, kind))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := rollout.Open(ctx, w.js)
	if err != nil {
		return []string{err.Error()}
	}
	ownPauses := map[string][]time.Time{}
	for _, r := range w.rollouts() {
		w.mu.Lock()
		ownPauses[r.id] = slices.Clone(r.pausedAt)
		w.mu.Unlock()
	}
	for id, p := range progress {
		if p.Planned == 0 {
			continue
		}
		want(id, events.NotifyStarted, "1", "its start")
		c, _, err := store.Get(ctx, id)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: its control record: %v", id, err))
			continue
		}
		// The pauses the schedule made, as the steps saw them, and those
		// kvlive made (gates, failed migrations), as its record keeps them.
		pauses := c.Pauses
		for _, at := range ownPauses[id] {
			if !slices.ContainsFunc(pauses, func(p events.Pause) bool { return p.At.Equal(at) }) {
				pauses = append(pauses, events.Pause{At: at, By: "soak"})
			}
		}
		for _, pause := range pauses {
			kind := events.NotifyPaused
			if pause.By == rollout.GatedBy {
				kind = events.NotifyHeld
			}
			want(id, kind, strconv.FormatInt(pause.At.UnixNano(), 10), fmt.Sprintf("its pause by %s at %s", pause.By, pause.At.Format("15:04:05.000")))
		}
		a, err := rollout.AccountOf(ctx, w.js, id)
		if err == nil {
			err = rollout.CountVerdicts(ctx, w.js, &a)
		}
		switch {
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: its account: %v", id, err))
		case a.Phase == rollout.PhaseAborted && a.Done():
			want(id, events.NotifyAborted, "1", "its abort")
		case a.Phase == rollout.PhaseComplete && events.IsUndo(id):
			want(id, events.NotifyUndone, "1", "its end")
		case a.Phase == rollout.PhaseComplete || a.Phase == rollout.PhaseIncomplete:
			want(id, events.NotifyCompleted, "1", "its end")
		}
	}
	took := map[string]bool{}
	for _, id := range w.told.IDs() {
		took[id] = true
		if stored[id] == 0 {
			failed = append(failed, fmt.Sprintf("the receiver took %s, which was never stored", id))
		}
	}
	for id := range stored {
		if !took[id] {
			failed = append(failed, fmt.Sprintf("notification %s stored, never taken by the receiver", id))
		}
	}
	return failed
}

// vmiState describes, for the report of a slot left held, the VMI of the
// VM the slot (its JSON after the key) names and the stand-in's migrations
// of it.
func (w *world) vmiState(slot string) string {
	var ms events.MigrationSlot
	if _, body, ok := strings.Cut(slot, ": "); !ok || json.Unmarshal([]byte(body), &ms) != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vmi, err := w.clients.Virt.KubevirtV1().VirtualMachineInstances(ms.VM.Namespace).Get(ctx, ms.VM.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("\n      its VMI: %v", err)
	}
	var conds []string
	for _, c := range vmi.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	out := fmt.Sprintf("\n      its VMI %s: phase %s, created %s, conditions %v, migration state %+v", vmi.UID, vmi.Status.Phase,
		vmi.CreationTimestamp.Format("15:04:05.000"), conds, vmi.Status.MigrationState)
	for _, m := range w.standin.History() {
		if m.VMI == ms.VM.Namespace+"/"+ms.VM.Name {
			out += fmt.Sprintf("\n      the stand-in migrated it %s–%s, failed %v", m.Started.Format("15:04:05.000"), m.Ended.Format("15:04:05.000"), m.Failed)
		}
	}
	return out
}
