package planner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

var supersedeRef = events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.medium"}

// edit is the work of supersedeRef's (uid-1's) change to gen.
func edit(gen int64) work {
	return work{eventID: events.EventID(supersedeRef.Kind, "uid-1", gen), generation: gen,
		target: instancetype.Target{Target: events.Target{Object: supersedeRef, UID: "uid-1", Generation: gen}}}
}

// putRecord stores a rollout record for id, or raw bytes when given.
func putRecord(t testing.TB, js jetstream.JetStream, id string, raw ...byte) {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec := raw
	if rec == nil {
		if rec, err = events.MarshalRollout(events.Rollout{EventID: id, Object: supersedeRef, Planned: 1, Counts: map[events.Result]int{events.ResultLive: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(t.Context(), events.RolloutKey(id), rec); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, js jetstream.JetStream, subject, id string) {
	t.Helper()
	if _, err := js.PublishMsg(t.Context(), events.NewMsg(subject, id, events.TypePlan, []byte("{}"))); err != nil {
		t.Fatal(err)
	}
}

// TestSupersedeAbortsTheOlderRolloutsThatStillMove: an edit aborts the
// object's older rollouts with a plan in flight, held or staged, whatever
// their records say, and leaves alone the ones that move nothing any
// more, the ones an operator aborted, newer ones and other objects'.
func TestSupersedeAbortsTheOlderRolloutsThatStillMove(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	id := func(gen int64) string { return edit(gen).eventID }
	putRecord(t, js, id(1)) // settled: nothing in the work streams
	putRecord(t, js, id(2), []byte("not a rollout record")...)
	publish(t, js, events.PlanSubject("ns", id(2)), id(2)+"/vm")
	putRecord(t, js, id(3))
	publish(t, js, events.HeldSubject("ns", id(3)), id(3)+"/vm")
	putRecord(t, js, id(4))
	publish(t, js, events.StagedSubject(1, id(4)), id(4)+"/vm")
	putRecord(t, js, id(5))
	publish(t, js, events.PlanSubject("ns", id(5)), id(5)+"/vm")
	putRecord(t, js, id(7))
	publish(t, js, events.PlanSubject("ns", id(7)), id(7)+"/vm")
	other := events.EventID(supersedeRef.Kind, "uid-2", 1)
	putRecord(t, js, other)
	publish(t, js, events.PlanSubject("ns", other), other+"/vm")
	store, err := rollout.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Apply(ctx, id(5), events.ActionAbort, "an operator's", "alice", time.Now(), false); err != nil {
		t.Fatal(err)
	}

	p, err := New(Config{Fleet: testenv.StartCache(t, testenv.FakeClients(nil)), JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.supersede(ctx, edit(6))
	if want := []string{id(2), id(3), id(4)}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("supersede = %v, %v; want %v", got, err, want)
	}
	for _, c := range []struct {
		id, reason string
	}{{id(1), ""}, {id(2), "superseded by " + id(6)}, {id(3), "superseded by " + id(6)}, {id(4), "superseded by " + id(6)},
		{id(5), "an operator's"}, {id(7), ""}, {other, ""}} {
		control, _, err := store.Get(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if aborted := control.State == events.StateAborted; !strings.HasPrefix(control.Reason, c.reason) || aborted != (c.reason != "") {
			t.Errorf("%s: control %+v, want reason %q", c.id, control, c.reason)
		}
	}
}

// TestSupersedeReadsNoOutcomes: which older rollouts still move is read
// without their outcomes, so a freshly started planner's first edit of an
// object edited many times before does not read every VM's outcome of
// every earlier rollout (the bench's first rollout of a new kvlive run
// waited most of a second on a 2,000-VM predecessor).
func TestSupersedeReadsNoOutcomes(t *testing.T) {
	js := testenv.JetStream(t)
	const rollouts, vms = 5, 200
	storeSettled(t, js, rollouts, vms)
	p, err := New(Config{Fleet: testenv.StartCache(t, testenv.FakeClients(nil)), JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	before := js.Conn().Stats().InMsgs
	if got, err := p.supersede(t.Context(), edit(rollouts+1)); err != nil || len(got) != 0 {
		t.Fatalf("supersede = %v, %v; want nothing: every older rollout is settled", got, err)
	}
	if read := js.Conn().Stats().InMsgs - before; read >= vms {
		t.Errorf("supersede received %d messages to find %d settled rollouts of %d VMs each, want a few (no outcome read)", read, rollouts, vms)
	}
}

// storeSettled stores rollouts of generations 1 to n of supersedeRef, each
// with an outcome for each of its vms VMs and nothing left in flight.
func storeSettled(t testing.TB, js jetstream.JetStream, n, vms int) {
	t.Helper()
	for gen := int64(1); gen <= int64(n); gen++ {
		id := edit(gen).eventID
		putRecord(t, js, id)
		for v := range vms {
			o := events.Outcome{EventID: id, VM: events.VMRef{Namespace: "ns", Name: fmt.Sprint("vm-", v), UID: fmt.Sprint("uid-", v)}, Result: events.ResultLive, Attempt: 1}
			oid := events.OutcomeID(id, o.VM.UID, 1)
			body, err := events.Encode(events.TypeOutcome, oid, "test", o.VM.String(), time.Now(), &o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishMsgAsync(events.NewMsg(events.OutcomeSubject("ns", id), oid, events.TypeOutcome, body)); err != nil {
				t.Fatal(err)
			}
			if v%1000 == 999 {
				waitPublished(t.Context(), t, js)
			}
		}
	}
	waitPublished(t.Context(), t, js)
}

func waitPublished(ctx context.Context, t testing.TB, js jetstream.JetStream) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(time.Minute):
		t.Fatal("publishes not acknowledged within a minute")
	}
}
