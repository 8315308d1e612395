package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// TestSwitchWaitGivesUpSayingTheSwitchGoesOn: with no kvlive running to
// carry the switch out, --wait ends at --timeout and says the request is
// queued and how to follow it, instead of waiting forever.
func TestSwitchWaitGivesUpSayingTheSwitchGoesOn(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := bus.ConnectEmbedded(ns, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Setup(t.Context(), js, events.DefaultStreamOptions()); err != nil {
		t.Fatal(err)
	}
	out, err := kvlive(t, "switch", "--nats-url", ns.ClientURL(), "--from", "clusterinstancetype/a", "--to", "clusterinstancetype/b", "--wait", "--timeout", "1s")
	if err == nil || !strings.Contains(err.Error(), "--timeout 1s passed") || !strings.Contains(err.Error(), "is queued and goes on") ||
		!strings.Contains(err.Error(), "kvlive rollout status switch/") {
		t.Fatalf("switch --wait with nothing to carry it out: %v\n%s", err, out)
	}
	if !strings.Contains(out, "switch requested: switch/") {
		t.Errorf("output %q lacks the request id", out)
	}
}
