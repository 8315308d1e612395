package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// A Keeper ages kvlive's records out with the replay horizon (--max-age),
// except a rollout's that has not settled: the events, outcomes and dead
// letters streams have no age limit of their own, since a limit would drop
// the records of a rollout paused (or waiting for a promote) longer than the
// horizon, and the rollout record and control record with them, so that on
// resume every plan left would be refused as one the planner never made.
//
// A rollout's records (its event, outcomes, dead letters, rollout record,
// VM list and control record) go together, once it has settled (Account.Done)
// and nothing has happened to it for a horizon. Messages of no rollout (an
// event dead-lettered before it was planned, a dead letter kvlive could not
// read an event from) go once they are older than the horizon, except an
// event the planner has not acked yet: it is pending work. A control record
// of an event never planned goes a horizon after its last change, unless it
// pauses the event ahead of time. Spans keep a stream age limit: a trace is
// not what a rollout needs to finish.
//
// Every replica running the planner keeps, each sweep idempotent, so
// several at once remove each record once.
type Keeper struct {
	JS      jetstream.JetStream
	Horizon time.Duration
	Log     *slog.Logger
	// AgedOut, when set, is told how many records of what kind (rollout,
	// message, control) each sweep removed; Kept how many unsettled
	// rollouts it kept past the horizon.
	AgedOut func(what string, n int)
	Kept    func(n int)
	// Marked, when set, is told after each sweep's settle check how many
	// rollouts it marked settled and how many recorded ones it left open
	// (running, paused, verifying, or quiet for less than
	// KeepEvery(Horizon)).
	Marked func(marked, open int)
	// Failed, when set, is told of each sweep that failed.
	Failed func()
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	reported map[string]bool // rollouts already logged as kept
	// accounted, when set, is told of each rollout whose account a
	// sweep's settle check reads (tests).
	accounted func(id string)
}

// Swept is what one sweep did.
type Swept struct {
	// Settled are the rollouts this sweep marked settled (Store.MarkSettled).
	Settled int
	// Rollouts are the settled rollouts whose records aged out; Messages
	// the messages of no rollout removed; Controls the control records
	// of events never planned removed.
	Rollouts, Messages, Controls int
	// Kept are the rollouts older than the horizon kept because they
	// have not settled, with their phase.
	Kept map[string]Phase
	// SettleAt is when the first open rollout that has not been quiet
	// for KeepEvery(Horizon) will have been (zero when none is quieting):
	// Run sweeps again then, so a rollout is marked settled a period
	// after its last activity, not up to two.
	SettleAt time.Time
}

// MinQuiet is the shortest a rollout is quiet (no outcome, no step) before
// a keeper marks it settled: KeepEvery's floor. A check that found a
// rollout open this recently ran while it was busy.
const MinQuiet = time.Second

// KeepEvery is how often a keeper sweeps for horizon: a quarter of it, at
// most a minute, at least MinQuiet; a minute when there is no horizon.
// A rollout is marked settled once it has been quiet for this long.
func KeepEvery(horizon time.Duration) time.Duration {
	if horizon <= 0 {
		return time.Minute
	}
	return min(max(horizon/4, MinQuiet), time.Minute)
}

// Run sweeps at once, then every KeepEvery(Horizon), and sooner when a
// rollout's quiet period ends before that (Swept.SettleAt), until ctx
// ends; a failed sweep is logged, counted (Failed) and tried again a
// period later. A zero horizon keeps everything (the sweeps only mark
// settled rollouts).
func (k *Keeper) Run(ctx context.Context) {
	every := KeepEvery(k.Horizon)
	for {
		sw, err := k.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			k.log().Warn("sweeping records failed; trying again", "every", every, "err", err)
			if k.Failed != nil {
				k.Failed()
			}
			sw.SettleAt = time.Time{} // a failing store is tried a period later
		}
		timer := time.NewTimer(nextSweep(every, sw.SettleAt, k.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// nextSweep is how long after now the next sweep comes: a period, or at
// settleAt when that is sooner, at least MinQuiet after this one.
func nextSweep(every time.Duration, settleAt, now time.Time) time.Duration {
	if settleAt.IsZero() {
		return every
	}
	return min(every, max(settleAt.Sub(now), MinQuiet))
}

func (k *Keeper) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// oldMsg is a message stored before the horizon, with the event it belongs
// to ("" when none can be read from it).
type oldMsg struct {
	stream string
	seq    uint64
	event  string
}

// Sweep removes, once, whatever has outlived the horizon and kvlive no
// longer needs.
func (k *Keeper) Sweep(ctx context.Context) (Swept, error) {
	sw := Swept{Kept: map[string]Phase{}}
	now := k.now()
	records, err := recordTimes(ctx, k.JS)
	if err != nil {
		return sw, err
	}
	controls, err := k.controlRecords(ctx)
	if err != nil {
		return sw, err
	}
	if sw.Settled, sw.SettleAt, err = k.settle(ctx, records, controls, now); err != nil {
		return sw, err
	}
	if k.Marked != nil {
		open := -sw.Settled
		for id := range records {
			if c, ok := controls[id]; !ok || c.Settled.IsZero() {
				open++
			}
		}
		k.Marked(sw.Settled, open)
	}
	if k.Horizon <= 0 {
		return sw, nil
	}
	cutoff := now.Add(-k.Horizon)
	// Old messages first, then the records: a rollout recorded meanwhile
	// is seen, so its messages are never taken for a rollout's of none.
	var old []oldMsg
	for _, stream := range []string{events.StreamEvents, events.StreamOutcomes, events.StreamDLQ, events.StreamNotify} {
		msgs, err := oldMessages(ctx, k.JS, stream, cutoff)
		if err != nil {
			return sw, err
		}
		old = append(old, msgs...)
	}
	// Then the records again: a rollout recorded meanwhile is seen.
	if records, err = recordTimes(ctx, k.JS); err != nil {
		return sw, err
	}
	purged := map[string]bool{} // rollouts whose outcomes and dead letters went
	for id, created := range records {
		if !created.Before(cutoff) {
			continue
		}
		gone, phase, err := k.ageOut(ctx, id, cutoff)
		switch {
		case err != nil:
			return sw, err
		case gone:
			sw.Rollouts++
			purged[id] = true
		case phase != "":
			sw.Kept[id] = phase
		}
	}
	if sw.Messages, err = k.orphans(ctx, old, purged); err != nil {
		return sw, err
	}
	if sw.Controls, err = k.controls(ctx, records, controls, cutoff); err != nil {
		return sw, err
	}
	k.report(sw)
	return sw, nil
}

// settle marks the rollouts that have settled as such, once nothing has
// happened to them (nor were they reopened) for KeepEvery(Horizon): the
// applier then moves no VM for a plan of theirs. It also returns when the
// first rollout still within that grace leaves it (zero when none is).
func (k *Keeper) settle(ctx context.Context, records map[string]time.Time, controls map[string]controlEntry, now time.Time) (int, time.Time, error) {
	grace := KeepEvery(k.Horizon)
	store, err := Open(ctx, k.JS)
	if err != nil {
		return 0, time.Time{}, err
	}
	marked, settleAt := 0, time.Time{}
	quieting := func(last time.Time) bool {
		if now.Sub(last) >= grace {
			return false
		}
		if at := last.Add(grace); settleAt.IsZero() || at.Before(settleAt) {
			settleAt = at
		}
		return true
	}
	for id, created := range records {
		c, ok := controls[id]
		if ok && !c.Settled.IsZero() {
			continue // marked
		}
		if quieting(created) {
			continue // planned too recently to have been quiet
		}
		// A rollout busy within the grace is not marked whatever its
		// account says: the outcomes of a large one are not read (some
		// 100,000 decoded) every sweep while it runs, nor every sweep of
		// the grace after its last one. What happened since is checked
		// again below, after the account.
		last, err := lastActivityOf(ctx, k.JS, id, created, c.Control)
		if err != nil {
			return marked, settleAt, err
		}
		if quieting(last) {
			continue
		}
		if k.accounted != nil {
			k.accounted(id)
		}
		a, err := AccountOf(ctx, k.JS, id)
		if errors.Is(err, ErrNoRollout) {
			continue
		}
		if err != nil {
			return marked, settleAt, fmt.Errorf("keep: account of %s: %w", id, err)
		}
		if !a.Done() {
			continue
		}
		if last, err = lastActivity(ctx, k.JS, a); err != nil {
			return marked, settleAt, err
		}
		if quieting(last) {
			continue
		}
		// Asked for before the mark, under one id per rollout: a sweep
		// that dies between the two asks again, and the request is stored
		// (and planned) once.
		if err := k.restartAfter(ctx, a, now); err != nil {
			return marked, settleAt, err
		}
		ok, err = store.MarkSettled(ctx, id, a.Control, now)
		if err != nil {
			return marked, settleAt, err
		}
		if ok {
			marked++
			k.log().Info("rollout settled: plans of it no longer move VMs", "event", id, "phase", a.Phase)
		}
	}
	return marked, settleAt, nil
}

// restartAfter asks, for a finished rollout whose policy says restart:
// pending, to restart the VMs it left waiting for a restart: those it
// moved predicting a restart, and those KubeVirt's verdict flagged
// RestartRequired. The restart rollout plans them as kvlive restart
// --pending does (a VM without RestartRequired by then, opted out or
// stopped is not restarted), within the policy's budget and window.
func (k *Keeper) restartAfter(ctx context.Context, a Account, now time.Time) error {
	rec := a.Record
	if rec.Policy.Restart != events.RestartPending || a.Phase != PhaseComplete || rec.Type == string(events.MoveRestart) {
		return nil
	}
	verdicts, err := currentVerdicts(ctx, k.JS, a.EventID)
	if err != nil {
		return fmt.Errorf("keep: verdicts of %s: %w", a.EventID, err)
	}
	var uids []string
	for uid, o := range a.Latest {
		if o.Result == events.ResultRestart || (o.Result.Moves() && verdicts[uid].Observed == events.ObservedRestart) {
			uids = append(uids, uid)
		}
	}
	if len(uids) == 0 {
		return nil
	}
	slices.Sort(uids)
	policy := rec.Policy
	id, err := RequestRestart(ctx, k.JS, events.RestartRequest{ID: events.RestartAfterID(a.EventID), Object: rec.Object,
		RequestedAt: now.UTC(), Policy: &policy, Only: uids, After: a.EventID})
	if err != nil {
		return fmt.Errorf("keep: the restart after %s: %w", a.EventID, err)
	}
	k.log().Info("rollout finished: restarting the VMs it left waiting for a restart (policy restart: pending)", "event", a.EventID, "restart", id, "vms", len(uids))
	return nil
}

// controlEntry is a control record with when it last changed.
type controlEntry struct {
	events.Control
	changed  time.Time
	revision uint64
	ok       bool // false: unreadable
}

// controlRecords reads every control record.
func (k *Keeper) controlRecords(ctx context.Context) (map[string]controlEntry, error) {
	kv, err := k.JS.KeyValue(ctx, events.BucketControl)
	if err != nil {
		return nil, fmt.Errorf("keep: kv %s: %w", events.BucketControl, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("keep: kv %s: %w", events.BucketControl, err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]controlEntry{}
	for entry := range w.Updates() {
		if entry == nil {
			break
		}
		c, err := events.UnmarshalControl(entry.Value())
		out[entry.Key()] = controlEntry{Control: c, changed: entry.Created(), revision: entry.Revision(), ok: err == nil}
	}
	return out, nil
}

// ageOut removes the records of rollout id if it has settled and nothing
// happened to it since cutoff; otherwise it returns the phase it was kept
// in ("" when it settled after cutoff).
func (k *Keeper) ageOut(ctx context.Context, id string, cutoff time.Time) (bool, Phase, error) {
	a, err := AccountOf(ctx, k.JS, id)
	if errors.Is(err, ErrNoRollout) {
		return false, "", nil // removed meanwhile by another replica
	}
	if err != nil {
		return false, "", fmt.Errorf("keep: account of %s: %w", id, err)
	}
	if !a.Done() {
		return false, a.Phase, nil
	}
	last, err := lastActivity(ctx, k.JS, a)
	if err != nil || !last.Before(cutoff) {
		return false, "", err
	}
	if err := removeRollout(ctx, k.JS, a.Record); err != nil {
		return false, "", err
	}
	k.log().Info("rollout aged out", "event", id, "phase", a.Phase, "settled", last.UTC().Format(time.RFC3339), "horizon", k.Horizon)
	return true, "", nil
}

// lastActivity is when anything last happened to a settled rollout: it was
// planned, a VM got an outcome, a verdict or a dead letter, an operator
// steered it or reopened it (dlq retry).
func lastActivity(ctx context.Context, js jetstream.JetStream, a Account) (time.Time, error) {
	return lastActivityOf(ctx, js, a.EventID, a.Since, a.Control)
}

// lastActivityOf is lastActivity from what is read without the account:
// since (when the rollout was planned, or its last outcome), the control
// record c, and the last message of each of its record subjects.
func lastActivityOf(ctx context.Context, js jetstream.JetStream, id string, since time.Time, c events.Control) (time.Time, error) {
	last := since
	for _, t := range []time.Time{c.At, c.BatchAt, c.GateAt, c.Reopened} {
		last = latest(last, t)
	}
	for _, r := range c.Retries {
		last = latest(last, r.At)
	}
	for _, s := range []struct{ stream, filter string }{
		{events.StreamOutcomes, events.OutcomesOf(id, "")},
		{events.StreamOutcomes, events.VerdictsOf(id)},
		{events.StreamOutcomes, events.ReobservedIn("", id)},
		{events.StreamDLQ, events.DeadLettersOf(id)},
	} {
		st, err := js.Stream(ctx, s.stream)
		if err != nil {
			return last, fmt.Errorf("keep: stream %s: %w", s.stream, err)
		}
		m, err := st.GetLastMsgForSubject(ctx, s.filter)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return last, fmt.Errorf("keep: last of %s in %s: %w", id, s.stream, err)
		default:
			last = latest(last, m.Time)
		}
	}
	return last, nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// removeRollout removes a settled rollout's records: the VM list, the
// control record and the rollout record first, then its messages. A sweep
// stopped midway leaves messages of no rollout, which the next one removes.
func removeRollout(ctx context.Context, js jetstream.JetStream, rec events.Rollout) error {
	id := rec.EventID
	rollouts, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		return fmt.Errorf("keep: kv %s: %w", events.BucketRollouts, err)
	}
	control, err := js.KeyValue(ctx, events.BucketControl)
	if err != nil {
		return fmt.Errorf("keep: kv %s: %w", events.BucketControl, err)
	}
	for i := range rec.VMChunks {
		if err := purgeKey(ctx, rollouts, events.VMListKey(id, rec.VMList, i)); err != nil {
			return err
		}
	}
	if err := purgeKey(ctx, control, events.ControlKey(id)); err != nil {
		return err
	}
	if err := purgeKey(ctx, rollouts, events.RolloutKey(id)); err != nil {
		return err
	}
	for _, s := range []struct{ stream, filter string }{
		{events.StreamOutcomes, events.OutcomesOf(id, "")},
		{events.StreamOutcomes, events.VerdictsOf(id)},
		{events.StreamOutcomes, events.ReobservedIn("", id)},
		{events.StreamDLQ, events.DeadLettersOf(id)},
		{events.StreamNotify, events.NotificationsOf(id)},
	} {
		st, err := js.Stream(ctx, s.stream)
		if err == nil {
			err = st.Purge(ctx, jetstream.WithPurgeSubject(s.filter))
		}
		if s.stream == events.StreamNotify && errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // made by the first notifier: none has run
		}
		if err != nil {
			return fmt.Errorf("keep: purge %s of %s: %w", s.stream, id, err)
		}
	}
	return nil
}

// purgeKey removes key with its history; the marker it leaves expires
// (the buckets' LimitMarkerTTL).
func purgeKey(ctx context.Context, kv jetstream.KeyValue, key string) error {
	err := kv.Purge(ctx, key, jetstream.PurgeTTL(markerTTL))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("keep: purge %s of %s: %w", key, kv.Bucket(), err)
	}
	return nil
}

// purgeAt removes key if it is still at revision; false when it changed
// since (or is gone).
func purgeAt(ctx context.Context, kv jetstream.KeyValue, key string, revision uint64) (bool, error) {
	err := kv.Purge(ctx, key, jetstream.PurgeTTL(markerTTL), jetstream.LastRevision(revision))
	switch {
	case err == nil:
		return true, nil
	case events.Conflict(err):
		return false, nil
	}
	return false, fmt.Errorf("keep: purge %s of %s: %w", key, kv.Bucket(), err)
}

// markerTTL is how long the marker of a purged key stays.
const markerTTL = time.Minute

// orphans removes the old messages that belong to no rollout recorded now
// (this sweep may have removed some, the planner recorded others since
// the messages were read): of the events stream only what the planner has
// acked.
func (k *Keeper) orphans(ctx context.Context, old []oldMsg, purged map[string]bool) (int, error) {
	var ackFloor uint64
	if c, err := k.JS.Consumer(ctx, events.StreamEvents, events.ConsumerPlanner); err == nil {
		if ci, err := c.Info(ctx); err == nil {
			ackFloor = ci.AckFloor.Stream
		}
	}
	recorded := map[string]bool{}
	removed := 0
	for _, m := range old {
		switch {
		case m.stream == events.StreamEvents && m.seq > ackFloor:
			continue // not planned yet
		case m.stream != events.StreamEvents && purged[m.event]:
			continue // gone with its rollout
		}
		if m.event != "" {
			still, ok := recorded[m.event]
			if !ok {
				var err error
				if _, still, err = Record(ctx, k.JS, m.event); err != nil {
					return removed, err
				}
				recorded[m.event] = still
			}
			if still {
				continue // a rollout's, kept or settled too recently
			}
		}
		st, err := k.JS.Stream(ctx, m.stream)
		if err == nil {
			err = st.DeleteMsg(ctx, m.seq)
		}
		if err != nil && !isNoMessage(err) {
			return removed, fmt.Errorf("keep: remove message %d of %s: %w", m.seq, m.stream, err)
		}
		removed++
	}
	return removed, nil
}

// isNoMessage reports a delete of a message that is gone already (another
// replica's sweep removed it).
func isNoMessage(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrMsgNotFound) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound || strings.Contains(apiErr.Description, "no message found"))
}

// controls removes the control records of events with no rollout record
// whose last change is older than cutoff, except a pause: it holds its
// event's plans until someone resumes it. Each goes only at the revision
// read: an operator's pause landing meanwhile stays.
func (k *Keeper) controls(ctx context.Context, records map[string]time.Time, controls map[string]controlEntry, cutoff time.Time) (int, error) {
	kv, err := k.JS.KeyValue(ctx, events.BucketControl)
	if err != nil {
		return 0, fmt.Errorf("keep: kv %s: %w", events.BucketControl, err)
	}
	removed := 0
	for key, c := range controls {
		if _, ok := records[key]; ok || !c.changed.Before(cutoff) || (c.ok && c.State == events.StatePaused) {
			continue
		}
		if _, still, err := Record(ctx, k.JS, key); err != nil || still {
			continue // planned meanwhile
		}
		purged, err := purgeAt(ctx, kv, key, c.revision)
		if err != nil {
			return removed, err
		}
		if purged {
			removed++
		}
	}
	return removed, nil
}

// recordTimes lists the rollout records (without their VM lists) with when
// each was written, from the bucket's metadata alone.
func recordTimes(ctx context.Context, js jetstream.JetStream) (map[string]time.Time, error) {
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		return nil, fmt.Errorf("keep: kv %s: %w", events.BucketRollouts, err)
	}
	w, err := kv.WatchFiltered(ctx, []string{events.RecordKeys}, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("keep: kv %s: %w", events.BucketRollouts, err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]time.Time{}
	for entry := range w.Updates() {
		if entry == nil {
			break
		}
		out[entry.Key()] = entry.Created()
	}
	return out, nil
}

// oldMessages reads the headers of stream's messages stored before cutoff,
// oldest first, with the event each belongs to: an event's own id, or the
// event named by an outcome's or dead letter's subject.
func oldMessages(ctx context.Context, js jetstream.JetStream, stream string, cutoff time.Time) ([]oldMsg, error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{HeadersOnly: true, MaxResetAttempts: 1,
		InactiveThreshold: bus.ReadInactive})
	if stream == events.StreamNotify && errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil // made by the first notifier: none has run
	}
	if err != nil {
		return nil, fmt.Errorf("keep: read %s: %w", stream, err)
	}
	if info := cons.CachedInfo(); info == nil || info.NumPending == 0 {
		return nil, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return nil, fmt.Errorf("keep: read %s: %w", stream, err)
	}
	defer it.Stop()
	var out []oldMsg
	for {
		msg, err := it.Next(jetstream.NextMaxWait(5 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("keep: read %s after %d old messages: %w", stream, len(out), err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("keep: read %s: %w", stream, err)
		}
		if !md.Timestamp.Before(cutoff) {
			return out, nil
		}
		out = append(out, oldMsg{stream: stream, seq: md.Sequence.Stream, event: eventOf(stream, msg)})
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// eventOf is the event a stored message belongs to, "" when none.
func eventOf(stream string, msg jetstream.Msg) string {
	if stream == events.StreamEvents {
		return msg.Headers().Get(jetstream.MsgIDHeader)
	}
	subject := msg.Subject()
	if stream == events.StreamNotify {
		id, _ := events.EventOfNotifySubject(subject)
		return id
	}
	if stream == events.StreamDLQ && !strings.Contains(subject, ".plans.") && !strings.Contains(subject, ".held.") && !strings.Contains(subject, ".staged.") {
		return "" // a dead event's subject names its kind, not its id
	}
	id, err := events.EventOfSubject(subject)
	if err != nil {
		return ""
	}
	return id
}

// report logs each rollout kept past the horizon once per keeper, and
// tells the metrics what the sweep did.
func (k *Keeper) report(sw Swept) {
	if k.reported == nil {
		k.reported = map[string]bool{}
	}
	for id, phase := range sw.Kept {
		if !k.reported[id] {
			k.reported[id] = true
			k.log().Info("rollout kept past the replay horizon until it settles", "event", id, "phase", phase, "horizon", k.Horizon)
		}
	}
	for id := range k.reported {
		if _, ok := sw.Kept[id]; !ok {
			delete(k.reported, id)
		}
	}
	if sw.Messages > 0 {
		k.log().Info("messages of no rollout aged out", "messages", sw.Messages, "horizon", k.Horizon)
	}
	if k.AgedOut != nil {
		k.AgedOut("rollout", sw.Rollouts)
		k.AgedOut("message", sw.Messages)
		k.AgedOut("control", sw.Controls)
	}
	if k.Kept != nil {
		k.Kept(len(sw.Kept))
	}
}

func (k *Keeper) log() *slog.Logger {
	if k.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return k.Log
}
