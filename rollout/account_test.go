package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

const acctEvent = "VirtualMachineClusterInstancetype/uid-u1/2"

func vmRef(uid string) events.VMRef {
	return events.VMRef{Namespace: "ns", Name: "vm-" + uid, UID: uid}
}

func recordRollout(t *testing.T, js jetstream.JetStream, planned int) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: acctEvent, Planned: planned, PlannedAt: time.Now()})
	if _, err := kv.Put(context.Background(), events.RolloutKey(acctEvent), rec); err != nil {
		t.Fatal(err)
	}
}

func publishOutcome(t *testing.T, js jetstream.JetStream, uid string, attempt int, result events.Result) {
	t.Helper()
	o := events.Outcome{EventID: acctEvent, VM: vmRef(uid), Attempt: attempt, Result: result, FinishedAt: time.Now()}
	id := events.OutcomeID(acctEvent, uid, attempt)
	body, err := events.Encode(events.TypeOutcome, id, "test", "", time.Now(), &o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), events.NewMsg(events.OutcomeSubject("ns", acctEvent), id, events.TypeOutcome, body)); err != nil {
		t.Fatal(err)
	}
}

func planMsg(t *testing.T, subject, uid string) *nats.Msg {
	t.Helper()
	p := events.Plan{EventID: acctEvent, VM: vmRef(uid), Action: events.ResultLive,
		Target: events.Target{Move: events.MoveRepin, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}, UID: "uid-u1", Generation: 2}}
	id := events.PlanID(acctEvent, uid)
	body, err := events.Encode(events.TypePlan, id, "test", "", time.Now(), &p)
	if err != nil {
		t.Fatal(err)
	}
	return events.NewMsg(subject, id, events.TypePlan, body)
}

func publish(t *testing.T, js jetstream.JetStream, m *nats.Msg) uint64 {
	t.Helper()
	ack, err := js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func account(t *testing.T, js jetstream.JetStream) Account {
	t.Helper()
	a, err := AccountOf(context.Background(), js, acctEvent)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAccountingArithmetic: planned = outcomes + dead letters + held + in
// flight, and the phase follows from it.
func TestAccountingArithmetic(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	recordRollout(t, js, 5)
	publishOutcome(t, js, "a", 1, events.ResultLive)
	publishOutcome(t, js, "b", 1, events.ResultFailed) // retried, then live: counted once, as live
	publishOutcome(t, js, "b", 2, events.ResultLive)
	// c failed on its last delivery: an outcome and a dead letter, one VM.
	publishOutcome(t, js, "c", 8, events.ResultFailed)
	dead := planMsg(t, events.DeadLetterSubject(events.ConsumerApplier, events.PlanSubject("ns", acctEvent)), "c")
	dead.Header.Del(jetstream.MsgIDHeader)
	publish(t, js, dead)
	// d is held by a pause, e still in flight.
	publish(t, js, planMsg(t, events.HeldSubject("ns", acctEvent), "d"))
	inFlight := publish(t, js, planMsg(t, events.PlanSubject("ns", acctEvent), "e"))

	a := account(t, js)
	if a.Phase != PhaseRunning || a.Outcomes[events.ResultLive] != 2 || a.Outcomes[events.ResultFailed] != 1 ||
		a.DeadLetters != 0 || a.Held != 1 || a.InFlight != 1 || a.Settled() != 3 {
		t.Fatalf("running account = %+v", a)
	}
	// The gates' way, with the records already read, counts the same.
	with, err := AccountWith(ctx, js, a.Record, a.Control)
	if err != nil || with.Phase != a.Phase || with.Settled() != a.Settled() || with.Held != a.Held || with.InFlight != a.InFlight ||
		with.Outcomes[events.ResultLive] != 2 {
		t.Fatalf("AccountWith = %+v, %v; AccountOf = %+v", with, err, a)
	}

	// The in-flight plan is gone without an outcome (say, lost), and the
	// held plan is dead-lettered: nothing moves any more, one VM is missing.
	plans, _ := js.Stream(ctx, events.StreamPlans)
	if err := plans.DeleteMsg(ctx, inFlight); err != nil {
		t.Fatal(err)
	}
	held, _ := js.Stream(ctx, events.StreamHeld)
	if err := held.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	// The releaser dead-letters it, from the held stream.
	dd := planMsg(t, events.DeadLetterSubject("releaser", events.HeldSubject("ns", acctEvent)), "d")
	dd.Header.Del(jetstream.MsgIDHeader)
	publish(t, js, dd)
	if a = account(t, js); a.DeadLetters != 1 {
		t.Fatalf("the releaser's dead letter not counted: %+v", a)
	}
	// A plan for a VM the rollout did not plan, refused by the applier: no
	// VM of this rollout's.
	forged := planMsg(t, events.DeadLetterSubject(events.ConsumerApplier, events.PlanSubject("ns", acctEvent)), "f")
	forged.Header.Del(jetstream.MsgIDHeader)
	forged.Header.Set(events.HeaderDeadReason, events.ReasonNotPlanned+": rollout did not plan VM ns/vm-f")
	publish(t, js, forged)
	a = account(t, js)
	if a.Phase != PhaseIncomplete || a.Unaccounted != 1 || a.DeadLetters != 1 || a.Since.IsZero() {
		t.Fatalf("incomplete account = %+v", a)
	}

	publishOutcome(t, js, "e", 1, events.ResultNextBoot)
	if a = account(t, js); a.Phase != PhaseComplete || a.Unaccounted != 0 || !a.Done() {
		t.Fatalf("complete account = %+v", a)
	}
}

func TestAccountOfUnknownEventIsAnError(t *testing.T) {
	js := testenv.JetStream(t)
	if _, err := AccountOf(context.Background(), js, "typo-id"); !errors.Is(err, ErrNoRollout) {
		t.Fatalf("account of an unknown id: %v, want ErrNoRollout", err)
	}
}

func TestAccountFollowsTheControlRecord(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// Paused ahead of the event: known, not planned yet.
	if _, _, err := s.Apply(ctx, acctEvent, events.ActionPause, "", "test", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if a := account(t, js); a.Phase != PhasePending {
		t.Fatalf("paused ahead: %+v", a)
	}
	recordRollout(t, js, 1)
	if a := account(t, js); a.Phase != PhasePaused {
		t.Fatalf("paused: %+v", a)
	}
	if _, _, err := s.Apply(ctx, acctEvent, events.ActionAbort, "", "test", time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if a := account(t, js); a.Phase != PhaseAborted || !a.Done() {
		t.Fatalf("aborted: %+v", a)
	}
}

// TestCorruptControlRecordConcernsItsEventAlone: an unreadable record is
// reported on its event, leaves other events alone, and --force replaces it.
func TestCorruptControlRecordConcernsItsEventAlone(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	recordRollout(t, js, 1)
	kv, _ := js.KeyValue(ctx, events.BucketControl)
	if _, err := kv.Put(ctx, events.ControlKey(acctEvent), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	a := account(t, js)
	if a.ControlError == "" || a.Phase != PhaseIncomplete {
		t.Fatalf("account with a corrupt control record = %+v", a)
	}
	s, _ := Open(ctx, js)
	if _, _, err := s.Apply(ctx, "other/event/1", events.ActionPause, "", "test", time.Now(), false); err != nil {
		t.Fatalf("another event is affected: %v", err)
	}
	_, _, err := s.Apply(ctx, acctEvent, events.ActionPause, "", "test", time.Now(), false)
	if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("pause over a corrupt record: %v, want a refusal naming --force", err)
	}
	if c, changed, err := s.Apply(ctx, acctEvent, events.ActionPause, "", "test", time.Now(), true); err != nil || !changed || c.State != events.StatePaused {
		t.Fatalf("forced pause: %+v %v %v", c, changed, err)
	}
	if a := account(t, js); a.ControlError != "" || a.Phase != PhasePaused {
		t.Fatalf("after --force: %+v", a)
	}
}

// TestResolveEventID: an id is itself, a unique prefix or short form its
// id, a shared prefix an error naming the candidates, and no match the
// argument.
func TestResolveEventID(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	const full = "VirtualMachineClusterInstancetype/2f6c1a3b-0d5e-4c1f-9a7b-1234567890ab/5"
	for _, id := range []string{"switch/0b5c77", "switch/0b9a11", "VirtualMachineClusterInstancetype/6f1c/2", full} {
		rec, _ := events.MarshalRollout(events.Rollout{EventID: id, Planned: 1})
		if _, err := kv.Put(ctx, events.RolloutKey(id), rec); err != nil {
			t.Fatal(err)
		}
	}
	for arg, want := range map[string]string{
		"switch/0b5c77":                       "switch/0b5c77",
		"switch/0b5":                          "switch/0b5c77",
		"VirtualMachineClusterInstancetype/6": "VirtualMachineClusterInstancetype/6f1c/2",
		"vmcf/2f6c1a3b/5":                     full,
		"vmcf/2f6c/5":                         full,
		"vmcf/2f6c1a3b/4":                     "vmcf/2f6c1a3b/4",
		"nothing":                             "nothing",
	} {
		if got, err := ResolveEventID(ctx, js, arg); err != nil || got != want {
			t.Errorf("ResolveEventID(%q) = %q, %v; want %q", arg, got, err, want)
		}
	}
	if _, err := ResolveEventID(ctx, js, "switch/0b"); err == nil || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), "switch/0b9a11") {
		t.Errorf("a shared prefix: %v", err)
	}
}

// movesOnAfter is a hook for tally that runs move once, right after the
// read named after.
func movesOnAfter(after string, move func()) func(what string) {
	moved := false
	return func(what string) {
		if what == after && !moved {
			moved = true
			move()
		}
	}
}

// accountHooked is account with tally calling hook after each read.
func accountHooked(t *testing.T, js jetstream.JetStream, hook func(string)) Account {
	t.Helper()
	a, err := accountOf(context.Background(), js, acctEvent, hook)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAccountNeverCallsARunningRolloutIncomplete: the applier stores a VM's
// outcome and then acks its plan, possibly between two of the account's
// reads. Whichever reads it falls between, the account says running (or
// complete), never incomplete with a VM unaccounted for: that would end
// `kvlive rollout status --follow` early, claiming a VM was lost.
func TestAccountNeverCallsARunningRolloutIncomplete(t *testing.T) {
	for _, after := range []string{"outcomes", "dead letters", "held", "in flight", "staged"} {
		t.Run("applied after the "+after+" read", func(t *testing.T) {
			js := testenv.JetStream(t)
			ctx := context.Background()
			recordRollout(t, js, 1)
			seq := publish(t, js, planMsg(t, events.PlanSubject("ns", acctEvent), "e"))
			hook := movesOnAfter(after, func() {
				publishOutcome(t, js, "e", 1, events.ResultLive)
				plans, _ := js.Stream(ctx, events.StreamPlans)
				if err := plans.DeleteMsg(ctx, seq); err != nil {
					t.Error(err)
				}
			})
			if a := accountHooked(t, js, hook); a.Phase != PhaseRunning && a.Phase != PhaseComplete {
				t.Fatalf("account = %s (%d unaccounted), want running or complete", a.Phase, a.Unaccounted)
			}
			if a := account(t, js); a.Phase != PhaseComplete {
				t.Fatalf("account after = %s, want complete", a.Phase)
			}
		})
	}
}

// TestAccountOfAPlanParkedMidRead: a plan the applier parks (a pause just
// lifted, seen late) moves from the plans stream to the held one, against
// the account's read order; it is still never called unaccounted for.
func TestAccountOfAPlanParkedMidRead(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	recordRollout(t, js, 1)
	seq := publish(t, js, planMsg(t, events.PlanSubject("ns", acctEvent), "e"))
	hook := movesOnAfter("held", func() {
		publish(t, js, planMsg(t, events.HeldSubject("ns", acctEvent), "e"))
		plans, _ := js.Stream(ctx, events.StreamPlans)
		if err := plans.DeleteMsg(ctx, seq); err != nil {
			t.Error(err)
		}
	})
	if a := accountHooked(t, js, hook); a.Phase != PhaseRunning || a.Held != 1 {
		t.Fatalf("account = %s (held %d, %d unaccounted), want running with one held", a.Phase, a.Held, a.Unaccounted)
	}
}

// TestAnIncompleteRolloutSaysItsRecordsWereDropped: an outcomes stream too
// small for a rollout drops its oldest outcomes; the account says which
// stream dropped records of the rollout, instead of only "unaccounted".
func TestAnIncompleteRolloutSaysItsRecordsWereDropped(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.MaxBytes = 16 << 10 })
	const planned = 60
	recordRollout(t, js, planned)
	for i := range planned {
		publishOutcome(t, js, fmt.Sprintf("u%03d", i), 1, events.ResultLive)
	}
	a := account(t, js)
	if a.Phase != PhaseIncomplete || a.Unaccounted == 0 {
		t.Fatalf("phase %s with %d unaccounted; the stream was meant to drop outcomes", a.Phase, a.Unaccounted)
	}
	if len(a.Dropped) != 1 || !strings.Contains(a.Dropped[0], events.StreamOutcomes) || !strings.Contains(a.Dropped[0], "max bytes 16384") {
		t.Errorf("dropped = %q, want the outcomes stream and its limit", a.Dropped)
	}
}

// TestAnIncompleteRolloutWithNothingDroppedNamesNoStream: a stream that
// dropped nothing is not blamed.
func TestAnIncompleteRolloutWithNothingDroppedNamesNoStream(t *testing.T) {
	js := testenv.JetStream(t)
	recordRollout(t, js, 2)
	publishOutcome(t, js, "a", 1, events.ResultLive)
	if a := account(t, js); a.Phase != PhaseIncomplete || len(a.Dropped) != 0 {
		t.Errorf("phase %s, dropped %q; want incomplete with nothing dropped", a.Phase, a.Dropped)
	}
}

// TestWatchAccountFollowsARolloutUntilItIsDone: WatchAccount reports the account as it
// is, again as it changes, and returns once the rollout is done, or with
// ctx's error when ctx ends first.
func TestWatchAccountFollowsARolloutUntilItIsDone(t *testing.T) {
	js := testenv.JetStream(t)
	recordRollout(t, js, 2)
	store, err := Open(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	steer := func(action events.ControlAction) {
		if _, _, err := store.Apply(t.Context(), acctEvent, action, "", "alice", time.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
	steer(events.ActionPause)
	a := account(t, js)
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if last, err := WatchAccount(short, js, a, time.Millisecond, func(Account) {}); !errors.Is(err, context.DeadlineExceeded) || last.Done() {
		t.Fatalf("WatchAccount of a rollout that does not move: %v, done %v; want the deadline", err, last.Done())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var seen []int
	last, err := WatchAccount(ctx, js, a, 5*time.Millisecond, func(a Account) {
		if len(seen) > 0 && seen[len(seen)-1] == a.Settled() {
			return
		}
		seen = append(seen, a.Settled())
		if len(seen) == 1 { // resumed after the first look, the VMs settle
			publishOutcome(t, js, "a", 1, events.ResultLive)
			publishOutcome(t, js, "b", 1, events.ResultFailed)
			steer(events.ActionResume)
		}
	})
	if err != nil || !last.Done() || last.Phase != PhaseComplete || seen[0] != 0 || seen[len(seen)-1] != 2 {
		t.Fatalf("WatchAccount = %s with %d settled, %v; saw %v settled along the way", last.Phase, last.Settled(), err, seen)
	}
}
