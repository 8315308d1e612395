package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// TestSettleWithoutDeadLetter covers every fate that must not touch the
// dead-letter stream (noJS fails the test if it is published to).
func TestSettleWithoutDeadLetter(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		attempt uint64
		fate    Fate
		ackErr  error
		nakErr  error
		want    []call
		outcome string
		log     string
	}{
		{name: "done acks", attempt: 1, fate: Done(), want: []call{{op: "ack"}}, outcome: OutcomeAck},
		{name: "done on the last delivery acks", attempt: 5, fate: Done(), want: []call{{op: "ack"}}, outcome: OutcomeAck},
		{name: "failed ack is logged, not retried", attempt: 1, fate: Done(), ackErr: errors.New("conn closed"),
			want: []call{{op: "ack"}}, outcome: OutcomeFailed, log: "ack failed"},
		// rand pinned to 0.5: 10% off each delay (jitter 0.2).
		{name: "retry 1", attempt: 1, fate: Retry(boom), want: []call{{op: "nak-delay", delay: 900 * time.Millisecond}}, outcome: OutcomeNak, log: "will retry"},
		{name: "retry 2", attempt: 2, fate: Retry(boom), want: []call{{op: "nak-delay", delay: 1800 * time.Millisecond}}, outcome: OutcomeNak},
		{name: "retry 3", attempt: 3, fate: Retry(boom), want: []call{{op: "nak-delay", delay: 3600 * time.Millisecond}}, outcome: OutcomeNak},
		{name: "retry 4", attempt: 4, fate: Retry(boom), want: []call{{op: "nak-delay", delay: 7200 * time.Millisecond}}, outcome: OutcomeNak},
		{name: "zero fate is a retry", attempt: 1, fate: Fate{}, want: []call{{op: "nak-delay", delay: 900 * time.Millisecond}}, outcome: OutcomeNak, log: errNoFate.Error()},
		{name: "failed nak is counted", attempt: 1, fate: Retry(boom), nakErr: errors.New("conn closed"),
			want: []call{{op: "nak-delay", delay: 900 * time.Millisecond}}, outcome: OutcomeFailed, log: "nak failed"},
		{name: "interrupted on the last delivery is a short nak", attempt: 5, fate: interrupted(Retry(context.Canceled)),
			want: []call{{op: "nak-delay", delay: time.Second}}, outcome: OutcomeNak, log: "interrupted by shutdown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, m, logs := testRuntime(t, nil, nil)
			r.rand = func() float64 { return 0.5 }
			msg := newFakeMsg(tc.attempt, 42, "body")
			msg.ackErr, msg.nakErr = tc.ackErr, tc.nakErr
			r.Settle(context.Background(), msg, r.Delivery(msg), tc.fate)
			if got := msg.recorded(); !slices.Equal(got, tc.want) {
				t.Errorf("calls = %+v, want %+v", got, tc.want)
			}
			if m.get(tc.outcome) != 1 {
				t.Errorf("outcome %q not counted once: %+v", tc.outcome, m.settled)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log lacks %q:\n%s", tc.log, logs)
			}
		})
	}
}

// TestSettleRetryDelayWithinBounds uses the real random source: every
// delay is within the jitter band of its attempt's base delay.
func TestSettleRetryDelayWithinBounds(t *testing.T) {
	r, _, _ := testRuntime(t, nil, nil) // 1s..8s, jitter 0.2, MaxDeliver 5
	for attempt := uint64(1); attempt < 5; attempt++ {
		base := min(time.Second<<(attempt-1), 8*time.Second)
		for range 50 {
			msg := newFakeMsg(attempt, 1, "x")
			r.Settle(context.Background(), msg, r.Delivery(msg), Retry(errors.New("boom")))
			calls := msg.recorded()
			if len(calls) != 1 || calls[0].op != "nak-delay" {
				t.Fatalf("attempt %d: calls %+v, want one nak-delay", attempt, calls)
			}
			if d := calls[0].delay; d > base || d < base*8/10 {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, d, base*8/10, base)
			}
		}
	}
}

func TestSettlePoisonDeadLettersThenTerms(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	r, m, _ := testRuntime(t, js, nil)
	msg := newFakeMsg(1, 42, `{"not":"an event"`)
	msg.hdr.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	msg.hdr.Set(jetstream.MsgIDHeader, "original-id")
	// Copied, this would make the dead-letter publish fail.
	msg.hdr.Set(jetstream.ExpectedLastSeqHeader, "99")
	r.Settle(context.Background(), msg, r.Delivery(msg), Poison("cannot decode event"))

	if got, want := msg.recorded(), []call{{op: "term-reason", reason: "cannot decode event"}}; !slices.Equal(got, want) {
		t.Fatalf("calls = %+v, want %+v", got, want)
	}
	if m.get(OutcomeDeadLetter) != 1 {
		t.Errorf("dead letter not counted: %+v", m.settled)
	}
	dead := deadLetters(t, js)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	for k, want := range map[string]string{
		events.HeaderDeadReason:    "cannot decode event",
		events.HeaderDeadSubject:   msg.subject,
		events.HeaderDeadStream:    events.StreamEvents,
		events.HeaderDeadSequence:  "42",
		jetstream.MsgIDHeader:      "dead/" + events.StreamEvents + "/42",
		"traceparent":              msg.hdr.Get("traceparent"),
		events.HeaderDeadTruncated: "",
	} {
		if got := d.Header.Get(k); got != want {
			t.Errorf("dead letter header %s = %q, want %q", k, got, want)
		}
	}
	if d.Header.Get(jetstream.ExpectedLastSeqHeader) != "" {
		t.Errorf("JetStream publish header copied into the dead letter: %v", d.Header)
	}
	if d.Subject != events.DeadLetterSubject(events.ConsumerPlanner, msg.subject) || string(d.Data) != string(msg.data) {
		t.Errorf("dead letter %s %q, want %s %q", d.Subject, d.Data, events.DeadLetterSubject(events.ConsumerPlanner, msg.subject), msg.data)
	}
}

func TestSettleRetryOnLastDeliveryGivesUp(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	r, m, _ := testRuntime(t, js, nil) // MaxDeliver 5
	msg := newFakeMsg(5, 8, "plan")
	r.Settle(context.Background(), msg, r.Delivery(msg), Retry(errors.New("apiserver unavailable")))

	reason := "gave up after 5 deliveries: apiserver unavailable"
	if got, want := msg.recorded(), []call{{op: "term-reason", reason: reason}}; !slices.Equal(got, want) {
		t.Fatalf("calls = %+v, want %+v", got, want)
	}
	dead := deadLetters(t, js)
	if len(dead) != 1 || dead[0].Header.Get(events.HeaderDeadReason) != reason || string(dead[0].Data) != "plan" {
		t.Fatalf("dead letters = %+v, want one with reason %q", dead, reason)
	}
	if m.get(OutcomeDeadLetter) != 1 {
		t.Errorf("dead letter not counted: %+v", m.settled)
	}
}

// TestSettleDeadLetterFailureNaks: a dead letter that cannot be stored (no
// dead-letter stream here) must leave the message alive, to come back.
func TestSettleDeadLetterFailureNaks(t *testing.T) {
	js, _ := startJetStream(t, 0, true)
	for _, tc := range []struct {
		name    string
		attempt uint64
		fate    Fate
		base    time.Duration
		reason  string
	}{
		{name: "poison", attempt: 1, fate: Poison("cannot decode"), base: time.Second, reason: "cannot decode"},
		{name: "last retry", attempt: 5, fate: Retry(errors.New("boom")), base: 8 * time.Second, reason: "gave up after 5 deliveries: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, m, logs := testRuntime(t, js, nil)
			msg := newFakeMsg(tc.attempt, 42, "body")
			r.Settle(context.Background(), msg, r.Delivery(msg), tc.fate)
			calls := msg.recorded()
			if len(calls) != 1 || calls[0].op != "nak-delay" || calls[0].delay > tc.base || calls[0].delay < tc.base*8/10 {
				t.Fatalf("calls = %+v, want one nak-delay within [%s, %s] and no term", calls, tc.base*8/10, tc.base)
			}
			if m.deadLetterFailures() != 1 || m.get(OutcomeNak) != 1 || m.get(OutcomeDeadLetter) != 0 {
				t.Errorf("metrics: dead-letter failures %d, settled %+v", m.deadLetterFailures(), m.settled)
			}
			out := logs.String()
			for _, want := range []string{"level=ERROR", "dead letter not stored", "stage=planner", "subject=kvlive.events.test",
				"seq=42", "stream=" + events.StreamEvents, "reason=", tc.reason, "err="} {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestSettleTermFailureAfterDeadLetter(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	r, m, logs := testRuntime(t, js, nil)
	msg := newFakeMsg(1, 3, "x")
	msg.termErr = errors.New("conn closed")
	r.Settle(context.Background(), msg, r.Delivery(msg), Poison("bad"))
	// The redelivery dead-letters it again: the copy is deduplicated.
	msg.termErr = nil
	r.Settle(context.Background(), msg, r.Delivery(msg), Poison("bad"))
	if n := len(deadLetters(t, js)); n != 1 {
		t.Errorf("%d dead letters, want 1 (deduplicated by Msg-Id)", n)
	}
	if m.get(OutcomeFailed) != 1 || m.get(OutcomeDeadLetter) != 1 || !strings.Contains(logs.String(), "terminating a dead-lettered message failed") {
		t.Errorf("settled %+v, log:\n%s", m.settled, logs)
	}
}
