package bus

import (
	"strings"
	"testing"
)

// TestOpenEmbeddedHoldsItsStore: Open starts the embedded server on its
// store and connects to it; a second process on the same store is refused
// naming the first, which Close lets go of; a third then opens it. The
// store says where it is served while held.
func TestOpenEmbeddedHoldsItsStore(t *testing.T) {
	dir := t.TempDir()
	opts := OpenOptions{Name: "test", DataDir: dir, Host: "127.0.0.1", Port: -1, Command: "kvlive run"}
	first, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Ready(); err != nil {
		t.Errorf("ready: %v", err)
	}
	if _, err := first.JetStream.AccountInfo(t.Context()); err != nil {
		t.Errorf("JetStream: %v", err)
	}
	holder, held := StoreHolder(dir)
	if !held || holder.Command != "kvlive run" || !strings.HasPrefix(holder.URL, "nats://127.0.0.1:") {
		t.Errorf("the store's holder: %+v (held: %v), want kvlive run and its URL", holder, held)
	}
	if second, err := Open(opts); err == nil {
		_ = second.Close()
		t.Fatal("a second Open of a held store succeeded")
	} else if !strings.Contains(err.Error(), "kvlive run") {
		t.Errorf("a second Open: %v, want it to name the holder", err)
	}
	if err := first.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if first.Ready() == nil {
		t.Error("ready after Close")
	}
	third, err := Open(opts)
	if err != nil {
		t.Fatalf("Open after the first closed: %v", err)
	}
	_ = third.Close()
}

// TestOpenExternal connects to a server at a URL.
func TestOpenExternal(t *testing.T) {
	ns, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	b, err := Open(OpenOptions{Name: "test", URL: LocalURL(ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if _, err := b.JetStream.AccountInfo(t.Context()); err != nil || b.Ready() != nil {
		t.Errorf("JetStream: %v, ready: %v", err, b.Ready())
	}
}

// TestOpenToReadServesNoOtherProcess: a command reading a store opens it
// with a server that does not listen, and its lock says it serves no one.
func TestOpenToReadServesNoOtherProcess(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(OpenOptions{Name: "test", DataDir: dir, DontListen: true, Command: "kvlive (reading)"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if h, held := StoreHolder(dir); !held || h.URL != "" || h.Command != "kvlive (reading)" {
		t.Errorf("the store's holder: %+v (held: %v), want kvlive (reading) serving no URL", h, held)
	}
	if _, err := b.JetStream.AccountInfo(t.Context()); err != nil {
		t.Errorf("JetStream: %v", err)
	}
}
