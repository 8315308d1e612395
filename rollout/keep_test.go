package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// keepFixture is a bus holding rollouts in every phase a keeper must tell
// apart, each with its event in the events stream.
func keepFixture(t *testing.T) jetstream.JetStream {
	t.Helper()
	ctx := context.Background()
	js := testenv.JetStream(t)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	record := func(id string, planned int) {
		list := "l" + id
		vms := make([]events.PlannedVM, planned)
		for i := range vms {
			vms[i] = events.PlannedVM{VMRef: vmRef(id + "-" + string(rune('a'+i)))}
		}
		if _, err := kv.Put(ctx, events.VMListKey(id, list, 0), mustJSON(t, vms)); err != nil {
			t.Fatal(err)
		}
		rec, _ := events.MarshalRollout(events.Rollout{EventID: id, Planned: planned, PlannedAt: time.Now(), VMList: list, VMChunks: 1})
		if _, err := kv.Put(ctx, events.RolloutKey(id), rec); err != nil {
			t.Fatal(err)
		}
	}
	outcome := func(id, uid string) {
		o := events.Outcome{EventID: id, VM: vmRef(uid), Attempt: 1, Result: events.ResultLive, FinishedAt: time.Now()}
		body, _ := events.Encode(events.TypeOutcome, events.OutcomeID(id, uid, 1), "test", "", time.Now(), &o)
		if _, err := js.PublishMsg(ctx, events.NewMsg(events.OutcomeSubject("ns", id), events.OutcomeID(id, uid, 1), events.TypeOutcome, body)); err != nil {
			t.Fatal(err)
		}
	}
	verdict := func(id, uid string) {
		v := events.Verdict{EventID: id, VM: vmRef(uid), Predicted: events.ResultLive, Observed: events.ObservedLive, Reason: "test",
			MovedAt: time.Now(), ObservedAt: time.Now()}
		body, _ := events.Encode(events.TypeVerdict, events.VerdictID(id, uid), "test", "", time.Now(), &v)
		if _, err := js.PublishMsg(ctx, events.NewMsg(events.VerdictSubject("ns", v.VM.UID, id), events.VerdictID(id, uid), events.TypeVerdict, body)); err != nil {
			t.Fatal(err)
		}
	}
	// The events, in stream order; all but the last acked by the planner.
	for _, id := range []string{"complete", "paused", "running", "forged", "unplanned"} {
		if _, err := js.PublishMsg(ctx, events.NewMsg(events.SwitchSubject(), id, events.TypeSwitchRequested, []byte("{}"))); err != nil {
			t.Fatal(err)
		}
	}
	c, err := js.Consumer(ctx, events.StreamEvents, events.ConsumerPlanner)
	if err != nil {
		t.Fatal(err)
	}
	// Fetch waits for all four (FetchNoWait returns what the consumer has
	// delivered so far, fewer on a loaded machine).
	batch, err := c.Fetch(4, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != 4 {
		t.Fatalf("the planner acked %d events, want 4 (%v)", acked, batch.Error())
	}
	record("complete", 2)
	outcome("complete", "complete-a")
	outcome("complete", "complete-b")
	verdict("complete", "complete-a")
	record("paused", 2)
	outcome("paused", "paused-a")
	record("running", 2)
	outcome("running", "running-a")
	verdict("running", "running-a")
	if _, err := js.PublishMsg(ctx, planMsg(t, events.PlanSubject("ns", "running"), "running-b")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, planMsg(t, events.HeldSubject("ns", "paused"), "paused-b")); err != nil {
		t.Fatal(err)
	}
	store, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		id     string
		action events.ControlAction
	}{{"paused", events.ActionPause}, {"aborted-ahead", events.ActionAbort}, {"paused-ahead", events.ActionPause}} {
		if _, _, err := store.Apply(ctx, s.id, s.action, "", "test", time.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

// TestKeeperAgesOutOnlyWhatNoRolloutNeeds: a horizon after everything
// happened, the settled rollout's records go, and so do the acked event
// of no rollout and the abort of an event never planned; the paused and
// the running rollout keep every record, and so do the event the planner
// has not acked and the pause of an event to come.
func TestKeeperAgesOutOnlyWhatNoRolloutNeeds(t *testing.T) {
	ctx := context.Background()
	js := keepFixture(t)
	const horizon = time.Hour
	k := &Keeper{JS: js, Horizon: horizon, Now: func() time.Time { return time.Now().Add(horizon / 2) }}
	if sw, err := k.Sweep(ctx); err != nil || sw.Rollouts+sw.Messages+sw.Controls != 0 || len(sw.Kept) != 0 || sw.Settled != 1 {
		t.Fatalf("within the horizon: %+v %v, want nothing touched, the complete rollout marked settled", sw, err)
	}
	k.Now = func() time.Time { return time.Now().Add(2 * horizon) }
	sw, err := k.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sw.Rollouts != 1 || sw.Messages != 2 || sw.Controls != 1 {
		t.Errorf("swept %+v, want 1 rollout, 2 messages (its event, the forged one), 1 control record", sw)
	}
	if sw.Kept["paused"] != PhasePaused || sw.Kept["running"] != PhaseRunning || len(sw.Kept) != 2 {
		t.Errorf("kept %v, want paused and running", sw.Kept)
	}
	if _, err := AccountOf(ctx, js, "complete"); !errors.Is(err, ErrNoRollout) {
		t.Errorf("the settled rollout: %v, want it aged out", err)
	}
	for _, id := range []string{"paused", "running"} {
		a, err := AccountOf(ctx, js, id)
		if err != nil || len(a.Latest) != 1 || a.Held+a.InFlight != 1 {
			t.Errorf("%s: %+v %v, want its outcome and its plan kept", id, a, err)
		}
		if vms, ok, err := PlannedVMs(ctx, js, a.Record); !ok || err != nil || len(vms) != 2 {
			t.Errorf("%s: VM list %v %v %v, want it kept", id, vms, ok, err)
		}
	}
	if n, _ := CountSubjects(ctx, js, events.StreamOutcomes, events.OutcomesOf("complete", "")); n != 0 {
		t.Errorf("%d outcomes of the settled rollout left", n)
	}
	if n, _ := CountSubjects(ctx, js, events.StreamOutcomes, events.VerdictsOf("complete")); n != 0 {
		t.Errorf("%d verdicts of the settled rollout left", n)
	}
	if n, _ := CountSubjects(ctx, js, events.StreamOutcomes, events.VerdictsOf("running")); n != 1 {
		t.Errorf("%d verdicts of the running rollout left, want its one kept", n)
	}
	if left := eventIDsIn(t, js); len(left) != 3 || left[0] != "paused" || left[1] != "running" || left[2] != "unplanned" {
		t.Errorf("events left %v, want paused, running, unplanned", left)
	}
	store, _ := Open(ctx, js)
	for id, want := range map[string]bool{"aborted-ahead": false, "paused-ahead": true, "paused": true} {
		if _, rev, err := store.Get(ctx, id); err != nil || (rev > 0) != want {
			t.Errorf("control record of %s: revision %d %v, want kept %v", id, rev, err, want)
		}
	}
	if sw, err := k.Sweep(ctx); err != nil || sw.Rollouts+sw.Messages+sw.Controls != 0 {
		t.Errorf("a second sweep: %+v %v, want nothing more removed", sw, err)
	}
}

// TestKeeperMarksSettledRolloutsOnce: a sweep marks the settled rollout,
// and only it, once nothing has happened to it for a sweep's period; a
// rollout reopened (by dlq retry) is not marked again within that period,
// whatever it looked like before.
func TestKeeperMarksSettledRolloutsOnce(t *testing.T) {
	ctx := context.Background()
	js := keepFixture(t)
	store, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var told [2]int // what the last sweep told Marked
	k := &Keeper{JS: js, Horizon: time.Hour, Marked: func(marked, open int) { told = [2]int{marked, open} }}
	if sw, err := k.Sweep(ctx); err != nil || sw.Settled != 0 {
		t.Fatalf("right after the last outcome: %+v %v, want nothing marked yet", sw, err)
	}
	if told != [2]int{0, 3} {
		t.Errorf("told %d marked, %d open; want 0 and 3 (complete, paused, running)", told[0], told[1])
	}
	later := time.Now().Add(2 * KeepEvery(time.Hour))
	k.Now = func() time.Time { return later }
	if sw, err := k.Sweep(ctx); err != nil || sw.Settled != 1 {
		t.Fatalf("a period later: %+v %v, want the complete rollout marked", sw, err)
	}
	if told != [2]int{1, 2} {
		t.Errorf("told %d marked, %d open; want 1 and 2 (paused, running)", told[0], told[1])
	}
	for id, want := range map[string]bool{"complete": true, "paused": false, "running": false} {
		if c, _, err := store.Get(ctx, id); err != nil || c.Settled.IsZero() == want {
			t.Errorf("%s: settled %v (%v), want marked %v", id, c.Settled, err, want)
		}
	}
	if sw, err := k.Sweep(ctx); err != nil || sw.Settled != 0 || told != [2]int{0, 2} {
		t.Errorf("a second sweep: %+v %v, told %v; want nothing marked again, 2 open", sw, err, told)
	}
	if err := store.Reopen(ctx, "complete", later); err != nil {
		t.Fatal(err)
	}
	if sw, err := k.Sweep(ctx); err != nil || sw.Settled != 0 {
		t.Errorf("right after a reopening: %+v %v, want it left open", sw, err)
	}
	if c, _, _ := store.Get(ctx, "complete"); !c.Settled.IsZero() {
		t.Errorf("reopened rollout marked settled at %v", c.Settled)
	}
	// A keeper that decided on the record before a reopening marks nothing.
	seen, _, _ := store.Get(ctx, "running")
	if err := store.Reopen(ctx, "running", later); err != nil {
		t.Fatal(err)
	}
	if marked, err := store.MarkSettled(ctx, "running", seen, later); err != nil || marked {
		t.Errorf("marked on a record reopened since: %v %v", marked, err)
	}
}

// eventIDsIn lists the ids of the events stream's messages, in order.
func eventIDsIn(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var ids []string
	err := scanSubject(context.Background(), js, events.StreamEvents, ">", func(m jetstream.Msg) {
		ids = append(ids, m.Headers().Get(jetstream.MsgIDHeader))
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAFailedSweepIsCounted: a sweep that cannot read the store ends in a
// log line and Failed, and the keeper keeps running.
func TestAFailedSweepIsCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := testenv.JetStream(t)
	if err := js.DeleteKeyValue(ctx, events.BucketRollouts); err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{}, 1)
	k := &Keeper{JS: js, Horizon: time.Hour, Failed: func() {
		select {
		case failed <- struct{}{}:
		default:
		}
	}}
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	select {
	case <-failed:
	case <-time.After(time.Minute):
		t.Fatal("no failed sweep counted in a minute")
	}
	cancel()
	<-done
}

// TestPurgeAtKeepsARecordChangedSince: a control record an operator
// changed after the keeper read it is not removed.
func TestPurgeAtKeepsARecordChangedSince(t *testing.T) {
	ctx := context.Background()
	js := testenv.JetStream(t)
	store, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []events.ControlAction{events.ActionPause, events.ActionResume} {
		if _, _, err := store.Apply(ctx, "e", action, "", "test", time.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
	_, read, _ := store.Get(ctx, "e") // resumed: the keeper would remove it
	if _, _, err := store.Apply(ctx, "e", events.ActionPause, "", "test", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	kv, _ := js.KeyValue(ctx, events.BucketControl)
	if purged, err := purgeAt(ctx, kv, "e", read); err != nil || purged {
		t.Fatalf("purge at the revision read: %v %v, want kept", purged, err)
	}
	c, rev, err := store.Get(ctx, "e")
	if err != nil || rev == 0 {
		t.Fatalf("the record: %+v rev %d %v, want it kept", c, rev, err)
	}
	if purged, err := purgeAt(ctx, kv, "e", rev); err != nil || !purged {
		t.Errorf("purge at the current revision: %v %v, want purged", purged, err)
	}
}

// TestAReopenedRolloutDoesNotAgeOut: a settled rollout a dlq retry
// reopened within the horizon keeps its records, so the plan sent back
// finds its rollout.
func TestAReopenedRolloutDoesNotAgeOut(t *testing.T) {
	ctx := context.Background()
	js := keepFixture(t)
	const horizon = time.Hour
	later := time.Now().Add(2 * horizon)
	store, _ := Open(ctx, js)
	if err := store.Reopen(ctx, "complete", later.Add(-horizon/2)); err != nil {
		t.Fatal(err)
	}
	k := &Keeper{JS: js, Horizon: horizon, Now: func() time.Time { return later }}
	if _, err := k.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := AccountOf(ctx, js, "complete"); err != nil {
		t.Errorf("the reopened rollout: %v, want its records kept", err)
	}
}

// TestKeeperReadsNoAccountOfABusyRollout: a finished rollout whose last
// outcome is younger than the keeper's grace is not read, however long
// ago it was planned (a sweep decoded every outcome of a 100,000-VM
// rollout, every minute while it ran and through the grace after it);
// once it has been quiet for the grace, its account is read and it is
// marked settled.
func TestKeeperReadsNoAccountOfABusyRollout(t *testing.T) {
	ctx := context.Background()
	js := testenv.JetStream(t)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	const id, horizon = "busy", 4 * time.Second
	grace := KeepEvery(horizon)
	rec, _ := events.MarshalRollout(events.Rollout{EventID: id, Planned: 1, PlannedAt: time.Now(), VMList: "l", VMChunks: 1})
	if _, err := kv.Put(ctx, events.RolloutKey(id), rec); err != nil {
		t.Fatal(err)
	}
	// The outcome lands a grace after the record, which the keeper's
	// clock then reads as long enough ago.
	time.Sleep(grace)
	o := events.Outcome{EventID: id, VM: vmRef("busy-a"), Attempt: 1, Result: events.ResultLive, FinishedAt: time.Now()}
	body, _ := events.Encode(events.TypeOutcome, events.OutcomeID(id, "busy-a", 1), "test", "", time.Now(), &o)
	if _, err := js.PublishMsg(ctx, events.NewMsg(events.OutcomeSubject("ns", id), events.OutcomeID(id, "busy-a", 1), events.TypeOutcome, body)); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, events.StreamOutcomes)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, events.OutcomesOf(id, ""))
	if err != nil {
		t.Fatal(err)
	}
	var read []string
	k := &Keeper{JS: js, Horizon: horizon, Now: func() time.Time { return last.Time.Add(grace / 2) },
		accounted: func(id string) { read = append(read, id) }}
	sw, err := k.Sweep(ctx)
	if err != nil || sw.Settled != 0 || len(read) != 0 {
		t.Fatalf("half a grace after the last outcome: %+v %v, accounts read %v; want none read, nothing marked", sw, err, read)
	}
	// The next sweep comes when its grace ends, not a period later.
	if want := last.Time.Add(grace); !sw.SettleAt.Equal(want) {
		t.Errorf("settle at %v, want %v: a grace after the last outcome", sw.SettleAt, want)
	}
	k.Now = func() time.Time { return last.Time.Add(grace + grace/2) }
	if sw, err := k.Sweep(ctx); err != nil || sw.Settled != 1 || len(read) != 1 || !sw.SettleAt.IsZero() {
		t.Fatalf("quiet for a grace: %+v %v, accounts read %v; want it read and marked, nothing left quieting", sw, err, read)
	}
}

// TestNextSweepComesWhenAGraceEnds: a keeper sweeps a period after the
// last sweep, or when an open rollout's grace ends if that is sooner, never
// sooner than MinQuiet.
func TestNextSweepComesWhenAGraceEnds(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		settleAt time.Time
		want     time.Duration
	}{
		{time.Time{}, time.Minute},
		{now.Add(20 * time.Second), 20 * time.Second},
		{now.Add(2 * time.Minute), time.Minute},
		{now.Add(-time.Second), MinQuiet},
	} {
		if got := nextSweep(time.Minute, c.settleAt, now); got != c.want {
			t.Errorf("settle at %v: next sweep in %v, want %v", c.settleAt.Sub(now), got, c.want)
		}
	}
}

// TestKeeperRemovesNotificationsWithTheirRollout: the notifications stream
// has no age limit of its own (a stored notification is what says it was
// told, issue 59 item 1); a horizon after the settled rollout's last
// change its notifications go with its records, the paused rollout's stay,
// and a notification of no rollout goes once older than the horizon.
func TestKeeperRemovesNotificationsWithTheirRollout(t *testing.T) {
	ctx := context.Background()
	js := keepFixture(t)
	const horizon = time.Hour
	o := events.DefaultStreamOptions()
	o.MaxAge = horizon
	cfg := events.NotifyStreamConfig(o)
	if cfg.MaxAge != 0 {
		t.Fatalf("the notifications stream ages its messages out after %s; want no age limit", cfg.MaxAge)
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"complete", "paused", "gone"} {
		if _, err := js.Publish(ctx, events.NotifySubject(id, events.NotifyStarted, "1"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	k := &Keeper{JS: js, Horizon: horizon, Now: func() time.Time { return time.Now().Add(2 * horizon) }}
	if _, err := k.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"complete": 0, "paused": 1, "gone": 0} {
		if n, err := CountSubjects(ctx, js, events.StreamNotify, events.NotificationsOf(id)); err != nil || n != want {
			t.Errorf("notifications of %s left: %d (%v), want %d", id, n, err, want)
		}
	}
}
