package bus

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenStoreRefusesADirectoryItDoesNotOwn(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(precious, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), "not a kvlive store") {
		t.Fatalf("OpenStore on a foreign directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("the foreign file is gone: %v", err)
	}
}

func TestEmptyRemovesOnlyTheJetStreamData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	for _, p := range []string{filepath.Join(dir, jetStreamDir, "stream"), filepath.Join(dir, "kept", "file")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Empty(); err != nil {
		t.Fatal(err)
	}
	if HasJetStream(dir) {
		t.Error("the JetStream data survived Empty")
	}
	if _, err := os.Stat(filepath.Join(dir, "kept", "file")); err != nil {
		t.Errorf("Empty removed what is not its own: %v", err)
	}
}

func TestASecondOpenSaysWhoHoldsTheStore(t *testing.T) {
	dir := t.TempDir()
	first, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Advertise("kvlive run", "nats://127.0.0.1:4222"); err != nil {
		t.Fatal(err)
	}
	_, err = OpenStore(dir)
	if !errors.Is(err, ErrStoreInUse) || !strings.Contains(err.Error(), "kvlive run") || !strings.Contains(err.Error(), "nats://127.0.0.1:4222") {
		t.Fatalf("second OpenStore: %v, want ErrStoreInUse naming the holder and its URL", err)
	}
	h, held := StoreHolder(dir)
	if !held || h.URL != "nats://127.0.0.1:4222" || h.PID != os.Getpid() {
		t.Fatalf("StoreHolder = %+v, %v", h, held)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, held := StoreHolder(dir); held {
		t.Fatal("the store is still held after Close")
	}
	again, err := OpenStore(dir)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	_ = again.Close()
}

func TestAStoreFromAnEarlierKvliveIsAdopted(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, jetStreamDir), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatalf("a directory holding only jetstream/: %v", err)
	}
	_ = s.Close()
}

func TestRunsDirectoryHoldingTheDemosStoreIsAdopted(t *testing.T) {
	parent := t.TempDir()
	demo, err := OpenStore(filepath.Join(parent, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	_ = demo.Close()
	run, err := OpenStore(parent)
	if err != nil {
		t.Fatalf("a directory holding only another kvlive store: %v", err)
	}
	_ = run.Close()
}

func TestADirectoryHoldingAnOldDemoStoreIsAdopted(t *testing.T) {
	parent := t.TempDir()
	if err := os.MkdirAll(filepath.Join(parent, "demo", jetStreamDir), 0o700); err != nil {
		t.Fatal(err)
	}
	run, err := OpenStore(parent)
	if err != nil {
		t.Fatalf("kvlive run's directory holding an earlier demo's store: %v", err)
	}
	_ = run.Close()
}

// TestAnotherServersStoreIsRefusedAndLeftAlone: an unmarked directory
// holding a JetStream store with streams that are not kvlive's is another
// NATS server's; kvlive neither adopts nor empties it. One holding only
// kvlive's streams (an earlier kvlive's) is adopted.
func TestAnotherServersStoreIsRefusedAndLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		streams []string
		adopt   bool
	}{
		{[]string{"KVLIVE_EVENTS", "KVLIVE_PLANS", "KV_kvlive-rollouts"}, true},
		{[]string{"KVLIVE_EVENTS", "ORDERS"}, false},
		{[]string{"KV_sessions"}, false},
	} {
		dir := t.TempDir()
		for _, st := range tc.streams {
			if err := os.MkdirAll(filepath.Join(dir, jetStreamDir, "$G", "streams", st, "msgs"), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		s, err := OpenStore(dir)
		if tc.adopt {
			if err != nil {
				t.Errorf("streams %v: %v", tc.streams, err)
				continue
			}
			_ = s.Close()
			continue
		}
		if err == nil {
			_ = s.Empty()
			_ = s.Close()
			t.Errorf("streams %v: adopted", tc.streams)
		}
		for _, st := range tc.streams {
			if _, err := os.Stat(filepath.Join(dir, jetStreamDir, "$G", "streams", st)); err != nil {
				t.Errorf("streams %v: %s touched: %v", tc.streams, st, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, storeMarker)); err == nil {
			t.Errorf("streams %v: marked as kvlive's", tc.streams)
		}
	}
}
