package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"kvlive/events"
)

// deadLetters leaves a store holding two dead letters from the applier.
func deadLetters(t *testing.T) string {
	t.Helper()
	dir := recordedStore(t)
	js, closeStore := openStore(t, dir)
	defer closeStore()
	for _, body := range []string{"plan-a", "plan-b"} {
		m := nats.NewMsg(events.DeadLetterSubject(events.ConsumerApplier, events.PlanSubject("shop", "ev")))
		m.Data = []byte(body)
		m.Header.Set(events.HeaderDeadReason, "gave up after 8 attempts: "+body)
		m.Header.Set(events.HeaderDeadSubject, events.PlanSubject("shop", "ev"))
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDLQCommands(t *testing.T) {
	dir := deadLetters(t)
	out, err := kvlive(t, "dlq", "list", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "gave up after 8 attempts: plan-a") || !strings.Contains(out, "2 dead letters") {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}
	if out, err = kvlive(t, "dlq", "show", "1", "--data-dir", dir); err != nil || !strings.Contains(out, "subject: kvlive.plans.shop") || !strings.Contains(out, "plan-a") {
		t.Fatalf("dlq show: %v\n%s", err, out)
	}
	if out, err = kvlive(t, "dlq", "retry", "1", "--data-dir", dir); err != nil || !strings.Contains(out, "retried 1") {
		t.Fatalf("dlq retry: %v\n%s", err, out)
	}
	if out, err = kvlive(t, "dlq", "list", "--data-dir", dir); err != nil || !strings.Contains(out, "1 dead letters") || strings.Contains(out, "plan-a") {
		t.Fatalf("after retry: %v\n%s", err, out)
	}
	if _, err = kvlive(t, "dlq", "purge", "--data-dir", dir); err == nil {
		t.Fatal("purge without sequences or --all succeeded")
	}
	if out, err = kvlive(t, "dlq", "purge", "--all", "--data-dir", dir); err != nil || !strings.Contains(out, "purged 1 dead letters") {
		t.Fatalf("dlq purge --all: %v\n%s", err, out)
	}
	if out, err = kvlive(t, "dlq", "list", "--data-dir", dir); err != nil || !strings.Contains(out, "0 dead letters") {
		t.Fatalf("after purge: %v\n%s", err, out)
	}
	// Empty: JSON is an empty list, and purging claims nothing.
	if out, err = kvlive(t, "dlq", "list", "-o", "json", "--data-dir", dir); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("dlq list -o json on an empty queue: %v\n%q", err, out)
	}
	if out, err = kvlive(t, "dlq", "purge", "--all", "--data-dir", dir); err != nil || !strings.Contains(out, "no dead letters to purge") {
		t.Fatalf("dlq purge --all on an empty queue: %v\n%s", err, out)
	}
	if _, err = kvlive(t, "dlq", "show", "x", "--data-dir", dir); err == nil {
		t.Fatal("dlq show x succeeded")
	}
}

func TestReplayNeedsASelection(t *testing.T) {
	if _, err := kvlive(t, "replay", "--data-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "select events") {
		t.Fatalf("replay without a selection: %v", err)
	}
	if _, err := kvlive(t, "replay", "--since", "yesterday", "--data-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Fatalf("replay --since yesterday: %v", err)
	}
}
