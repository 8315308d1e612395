package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"kvlive/events"
)

func TestNewRejectsBadConfig(t *testing.T) {
	valid := func() Config {
		return Config{Stage: events.ConsumerApplier, JetStream: noJS{t: t}, MaxDeliver: 3}
	}
	for name, mod := range map[string]func(*Config){
		"no stage":           func(c *Config) { c.Stage = "" },
		"stage with a dot":   func(c *Config) { c.Stage = "a.b" },
		"stage wildcard":     func(c *Config) { c.Stage = ">" },
		"no jetstream":       func(c *Config) { c.JetStream = nil },
		"negative workers":   func(c *Config) { c.Workers = -1 },
		"no budget":          func(c *Config) { c.MaxDeliver = 0 },
		"unlimited budget":   func(c *Config) { c.MaxDeliver = -1 },
		"negative ack wait":  func(c *Config) { c.AckWait = -time.Second },
		"negative grace":     func(c *Config) { c.Grace = -time.Second },
		"bad backoff":        func(c *Config) { c.Backoff = Backoff{Min: time.Second} },
		"bad backoff jitter": func(c *Config) { c.Backoff = Backoff{Min: time.Second, Max: time.Second, Jitter: 2} },
	} {
		cfg := valid()
		mod(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	r, err := New(valid())
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Workers != 1 || r.cfg.Backoff != DefaultBackoff() || r.cfg.Log == nil || r.cfg.Metrics == nil || r.cfg.Clock == nil {
		t.Errorf("defaults not filled in: %+v", r.cfg)
	}
}

func TestFateAccessors(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		f      Fate
		done   bool
		err    error
		reason string
		str    string
	}{
		{f: Done(), done: true, str: "done"},
		{f: Retry(boom), err: boom, str: "retry: boom"},
		{f: Retry(nil), err: errUnspecified, str: "retry: " + errUnspecified.Error()},
		{f: Poison("bad json"), reason: "bad json", str: "poison: bad json"},
		{f: Poison(""), reason: "poison message", str: "poison: poison message"},
		{f: Fate{}, err: errNoFate, str: "none"},
		{f: interrupted(Retry(boom)), err: boom, str: "interrupted: boom"},
	} {
		if tc.f.IsDone() != tc.done || !errors.Is(tc.f.Err(), tc.err) || (tc.err == nil) != (tc.f.Err() == nil) ||
			tc.f.Reason() != tc.reason || tc.f.String() != tc.str {
			t.Errorf("%s: IsDone %v Err %v Reason %q", tc.f, tc.f.IsDone(), tc.f.Err(), tc.f.Reason())
		}
	}
}

func TestDeliveryFromMetadata(t *testing.T) {
	r, _, logs := testRuntime(t, nil, nil) // MaxDeliver 5
	for _, tc := range []struct {
		attempt uint64
		want    Delivery
	}{
		{attempt: 1, want: Delivery{Attempt: 1, Stream: events.StreamEvents, Sequence: 7}},
		{attempt: 4, want: Delivery{Attempt: 4, Stream: events.StreamEvents, Sequence: 7}},
		{attempt: 5, want: Delivery{Attempt: 5, Last: true, Stream: events.StreamEvents, Sequence: 7}},
		{attempt: 9, want: Delivery{Attempt: 9, Last: true, Stream: events.StreamEvents, Sequence: 7}},
	} {
		if got := r.Delivery(newFakeMsg(tc.attempt, 7, "x")); got != tc.want {
			t.Errorf("NumDelivered %d: got %+v, want %+v", tc.attempt, got, tc.want)
		}
	}
	bare := newFakeMsg(3, 7, "x")
	bare.mdErr = errors.New("not a JetStream message")
	if got := r.Delivery(bare); got != (Delivery{Attempt: 1}) {
		t.Errorf("no metadata: got %+v, want attempt 1", got)
	}
	if !strings.Contains(logs.String(), "no JetStream metadata") {
		t.Errorf("missing metadata not logged:\n%s", logs)
	}
}
