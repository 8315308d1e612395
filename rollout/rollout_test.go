package rollout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// TestFollowReadsWholeStream follows an event whose outcomes come after
// many outcomes of an earlier event: Follow must read past the first batch
// of the stream, however long the stream's history.
func TestFollowReadsWholeStream(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	const n = 300
	publishOutcomes(t, js, "earlier", n)
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: "later", Planned: n})
	if _, err := kv.Put(ctx, events.RolloutKey("later"), rec); err != nil {
		t.Fatal(err)
	}
	publishOutcomes(t, js, "later", n)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := rollout.Follow(ctx, js, "later", nil)
	if err != nil || !p.Done() || len(p.Outcomes) != n {
		t.Fatalf("Follow = %d of %d outcomes, %v", len(p.Outcomes), p.Planned, err)
	}
}

func publishOutcomes(t *testing.T, js jetstream.JetStream, eventID string, n int) {
	t.Helper()
	for i := range n {
		o := events.Outcome{EventID: eventID, VM: events.VMRef{Namespace: "ns", Name: fmt.Sprint("vm-", i), UID: fmt.Sprint("uid-", i)}, Result: events.ResultLive}
		id := events.OutcomeID(eventID, o.VM.UID, 1)
		body, err := events.Encode(events.TypeOutcome, id, "test", o.VM.String(), time.Now(), &o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(context.Background(), events.NewMsg(events.OutcomeSubject("ns", eventID), id, events.TypeOutcome, body)); err != nil {
			t.Fatal(err)
		}
	}
}
