package planner

import (
	"strings"
	"testing"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/testenv"
)

// TestSupersedeAccountsAFinishedRolloutOnce: a rollout supersede found
// finished is final, so later edits of the object do not account it again
// (nor would they abort it, were its record to say otherwise).
func TestSupersedeAccountsAFinishedRolloutOnce(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}
	older := events.EventID(ref.Kind, "uid-1", 1)
	record := func(planned int) {
		t.Helper()
		kv, err := js.KeyValue(ctx, events.BucketRollouts)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := events.MarshalRollout(events.Rollout{EventID: older, Object: ref, Planned: planned, Counts: map[events.Result]int{events.ResultLive: planned}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, events.RolloutKey(older), rec); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(Config{Fleet: testenv.StartCache(t, testenv.FakeClients(nil)), JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(gen int64) work {
		return work{eventID: events.EventID(ref.Kind, "uid-1", gen), generation: gen,
			target: instancetype.Target{Target: events.Target{Object: ref, UID: "uid-1", Generation: gen}}}
	}

	record(0) // nothing planned: complete
	if got, err := p.supersede(ctx, edit(2)); err != nil || len(got) != 0 {
		t.Fatalf("edit 2 superseded %v (%v), want nothing: the older rollout is complete", got, err)
	}
	// As if it were running (a plan in flight): a settled rollout is not
	// looked at again.
	record(3)
	if _, err := js.PublishMsg(ctx, events.NewMsg(events.PlanSubject("ns", older), older+"/vm", events.TypePlan, []byte("{}"))); err != nil {
		t.Fatal(err)
	}
	if got, err := p.supersede(ctx, edit(3)); err != nil || len(got) != 0 {
		t.Errorf("edit 3 superseded %v (%v): the rollout found complete was accounted again", got, err)
	}
}

// TestSupersedeDoesNotPlanPastAnOlderRolloutItCannotAccount: when an older
// rollout of the object cannot be accounted (here its record does not
// decode), the edit is not planned as if it had finished: two rollouts
// would move the same VMs. The error retries the event, and its dead letter
// says why.
func TestSupersedeDoesNotPlanPastAnOlderRolloutItCannotAccount(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	ref := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}
	older := events.EventID(ref.Kind, "uid-1", 1)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, events.RolloutKey(older), []byte("not a rollout record")); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Fleet: testenv.StartCache(t, testenv.FakeClients(nil)), JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	w := work{eventID: events.EventID(ref.Kind, "uid-1", 2), generation: 2,
		target: instancetype.Target{Target: events.Target{Object: ref, UID: "uid-1", Generation: 2}}}
	if got, err := p.supersede(ctx, w); err == nil || !strings.Contains(err.Error(), older) {
		t.Fatalf("supersede = %v, %v; want an error naming %s", got, err, older)
	}
}
