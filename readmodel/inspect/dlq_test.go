package inspect

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/internal/testenv"
)

func TestListShowRetryPurge(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	put := func(body, reason string) {
		m := nats.NewMsg(events.DeadLetterSubject(events.ConsumerApplier, events.PlanSubject("shop", "ev")))
		m.Data = []byte(body)
		m.Header.Set(events.HeaderDeadReason, reason)
		m.Header.Set(events.HeaderDeadSubject, events.PlanSubject("shop", "ev"))
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
	if len(letters) != 2 || letters[0].Stage != "applier" || letters[0].Subject != "kvlive.plans.shop.ev" || letters[1].Reason != "events: malformed: envelope" {
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
	m, err := plans.GetLastMsgForSubject(ctx, events.PlanSubject("shop", "ev"))
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

// TestRetryRefusesATruncatedLetter: a dead letter stored cut short would
// go back as a corrupt message; retry says where the original is instead.
func TestRetryRefusesATruncatedLetter(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	m := nats.NewMsg(events.DeadLetterSubject(events.ConsumerApplier, events.PlanSubject("shop", "ev")))
	m.Data = []byte("the first bytes of a plan")
	m.Header.Set(events.HeaderDeadSubject, events.PlanSubject("shop", "ev"))
	m.Header.Set(events.HeaderDeadTruncated, "1048000")
	m.Header.Set(events.HeaderDeadStream, events.StreamPlans)
	m.Header.Set(events.HeaderDeadSequence, "42")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	err = Store{JetStream: js}.Retry(ctx, ack.Sequence)
	if err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), "message 42 of stream KVLIVE_PLANS") {
		t.Fatalf("retry of a truncated letter: %v", err)
	}
	if letters, _ := (Store{JetStream: js}).List(ctx); len(letters) != 1 {
		t.Errorf("the truncated letter was removed: %+v", letters)
	}
}

// TestRetryOfAHeldPlanGoesToTheApplier: a held plan the releaser
// dead-lettered goes to the plans stream when retried, where the applier
// holds it again if its rollout is paused; back in the held stream it would
// wait for a resume that already happened.
func TestRetryOfAHeldPlanGoesToTheApplier(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := context.Background()
	held := events.HeldSubject("shop", "ev")
	m := nats.NewMsg(events.DeadLetterSubject("releaser", held))
	m.Data = []byte("held-plan")
	m.Header.Set(events.HeaderDeadSubject, held)
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Store{JetStream: js}).Retry(ctx, ack.Sequence); err != nil {
		t.Fatal(err)
	}
	plans, err := js.Stream(ctx, events.StreamPlans)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := plans.GetLastMsgForSubject(ctx, events.PlanSubject("shop", "ev")); err != nil || string(got.Data) != "held-plan" {
		t.Errorf("the retried held plan is not on the plans stream: %v", err)
	}
}

// TestWriteLetters: the list ends with its count, and an empty list is []
// as data; one letter shows its headers sorted and its body.
func TestWriteLetters(t *testing.T) {
	l := Letter{Seq: 7, Time: t0, Stage: "applier", Subject: "kvlive.plans.shop.ev", Reason: "gave up after 8 attempts",
		Headers: nats.Header{"Z-Last": {"z"}, "A-First": {"a"}}, Data: []byte("plan-7")}
	var out bytes.Buffer
	if err := WriteLetters(&out, []Letter{l}, printer.FormatTable, 120); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "kvlive.plans.shop.ev") || !strings.HasSuffix(got, "\n1 dead letters\n") {
		t.Errorf("list:\n%s", got)
	}
	out.Reset()
	if err := WriteLetters(&out, nil, printer.FormatJSON, 120); err != nil || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("empty list as json: %q, %v", out.String(), err)
	}
	out.Reset()
	if err := WriteLetter(&out, l, printer.FormatTable); err != nil {
		t.Fatal(err)
	}
	want := "reason:  gave up after 8 attempts\nheaders:\n  A-First: a\n  Z-Last: z\nbody:\nplan-7\n"
	if got := out.String(); !strings.HasSuffix(got, want) {
		t.Errorf("letter:\n%s\nwant it to end with\n%s", got, want)
	}
}
