package bus_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"kvlive/internal/bus"
	"kvlive/internal/testenv"
)

// TestAsynchronousErrorsAreLogged: a subscription that falls behind drops
// messages (nats.go's slow consumer); kvlive's log says so, with the
// subject, instead of nats.go printing to stderr, and the count behind
// kvlive_nats_async_errors_total goes up.
func TestAsynchronousErrorsAreLogged(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	var logs testenv.LogBuffer
	var count bus.ErrorCount
	nc, err := bus.ConnectEmbedded(ns, t.Name(), slog.New(slog.NewTextHandler(&logs, nil)), count.Counted())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	release := make(chan struct{})
	sub, err := nc.Subscribe("slow", func(*nats.Msg) { <-release })
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	if err := sub.SetPendingLimits(1, -1); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := nc.Publish("slow", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "slow consumer") {
		if time.Now().After(deadline) {
			t.Fatalf("no slow consumer logged within 10s; log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "subject=slow") {
		t.Errorf("the log does not name the subject:\n%s", logs.String())
	}
	if count.Load() == 0 {
		t.Error("the asynchronous error was not counted")
	}
}

// TestCredentialsInURLsAreRedacted: a NATS URL carrying a password or a
// token never shows it in an error or a log line.
func TestCredentialsInURLsAreRedacted(t *testing.T) {
	for _, url := range []string{
		"nats://alice:s3cret@127.0.0.1:1",
		"nats://s3cret@127.0.0.1:1",
		"nats://127.0.0.1:2,nats://bob:s3cret@127.0.0.1:1",
	} {
		if r := bus.Redact(url); strings.Contains(r, "s3cret") || !strings.Contains(r, "127.0.0.1:1") {
			t.Errorf("Redact(%q) = %q", url, r)
		}
		var logs testenv.LogBuffer
		nc, err := bus.Connect(t.Name(), slog.New(slog.NewTextHandler(&logs, nil)), url, nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			t.Fatalf("connect %s succeeded", url)
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(logs.String(), "s3cret") {
			t.Errorf("connect %s: the password shows: %v\n%s", bus.Redact(url), err, logs.String())
		}
	}
}
