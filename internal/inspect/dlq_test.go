package inspect

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"kvlive/events"
	"kvlive/internal/testenv"
)

func TestListShowRetryPurge(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	put := func(body, reason string) {
		m := nats.NewMsg(events.DeadLetterSubject(events.ConsumerApplier))
		m.Data = []byte(body)
		m.Header.Set(events.HeaderDeadReason, reason)
		m.Header.Set(events.HeaderDeadSubject, events.PlanSubject("shop"))
		m.Header.Set("traceparent", "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	put("plan-1", "gave up after 8 attempts: connection refused")
	put("plan-2", "events: malformed: envelope")
	s := Store{JetStream: js}

	letters, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 2 || letters[0].Stage != "applier" || letters[0].Subject != "kvlive.plans.shop" || letters[1].Reason != "events: malformed: envelope" {
		t.Fatalf("list = %+v", letters)
	}
	if l, err := s.Show(ctx, letters[0].Seq); err != nil || string(l.Data) != "plan-1" {
		t.Fatalf("show = %+v, %v", l, err)
	}

	if err := s.Retry(ctx, letters[0].Seq); err != nil {
		t.Fatal(err)
	}
	plans, err := js.Stream(ctx, events.StreamPlans)
	if err != nil {
		t.Fatal(err)
	}
	m, err := plans.GetLastMsgForSubject(ctx, events.PlanSubject("shop"))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "plan-1" || m.Header.Get("traceparent") == "" || m.Header.Get(events.HeaderDeadReason) != "" {
		t.Errorf("retried message: %s %v", m.Data, m.Header)
	}
	if letters, err = s.List(ctx); err != nil || len(letters) != 1 || string(letters[0].Data) != "plan-2" {
		t.Fatalf("after retry: %+v, %v", letters, err)
	}
	if err := s.Purge(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if letters, err = s.List(ctx); err != nil || len(letters) != 0 {
		t.Fatalf("after purge: %+v, %v", letters, err)
	}
	if _, err := s.Show(ctx, 1); err == nil {
		t.Error("show of a purged letter succeeded")
	}
}
