package consumer

import (
	"testing"
	"time"
)

func TestBackoffDelayDoublesFromMinAndStopsAtMax(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 30 * time.Second, Jitter: 0.2}
	for _, tc := range []struct {
		attempt int
		u       float64
		want    time.Duration
	}{
		{attempt: 1, u: 0, want: time.Second},
		{attempt: 2, u: 0, want: 2 * time.Second},
		{attempt: 3, u: 0, want: 4 * time.Second},
		{attempt: 5, u: 0, want: 16 * time.Second},
		{attempt: 6, u: 0, want: 30 * time.Second},
		{attempt: 1000, u: 0, want: 30 * time.Second},
		// Jitter only shortens: the full draw takes 20% off.
		{attempt: 1, u: 1, want: 800 * time.Millisecond},
		{attempt: 3, u: 0.5, want: 3600 * time.Millisecond},
		{attempt: 1000, u: 1, want: 24 * time.Second},
		// A message without metadata counts as attempt 1; 0 must not panic.
		{attempt: 0, u: 0, want: time.Second},
	} {
		if got := b.delay(tc.attempt, tc.u); got != tc.want {
			t.Errorf("delay(attempt %d, u %v) = %s, want %s", tc.attempt, tc.u, got, tc.want)
		}
	}
}

func TestBackoffDelayStaysWithinJitterBounds(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}
	for attempt := 1; attempt <= 10; attempt++ {
		base := min(b.Min<<(attempt-1), b.Max)
		for range 200 {
			d := b.Delay(attempt)
			if d > base || d < base/2 {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", attempt, d, base/2, base)
			}
		}
	}
}

func TestBackoffDelayDoesNotOverflow(t *testing.T) {
	b := Backoff{Min: time.Hour, Max: time.Duration(1<<63 - 1)}
	if d := b.delay(200, 0); d <= 0 {
		t.Fatalf("delay overflowed to %s", d)
	}
}

func TestBackoffValidate(t *testing.T) {
	for name, b := range map[string]Backoff{
		"zero min":        {Max: time.Second},
		"max below min":   {Min: 2 * time.Second, Max: time.Second},
		"negative jitter": {Min: time.Second, Max: time.Second, Jitter: -0.1},
		"jitter above 1":  {Min: time.Second, Max: time.Second, Jitter: 1.5},
	} {
		if b.validate() == nil {
			t.Errorf("%s: %+v accepted", name, b)
		}
	}
	if err := DefaultBackoff().validate(); err != nil {
		t.Errorf("DefaultBackoff rejected: %v", err)
	}
}
