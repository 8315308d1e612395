package events

import (
	"testing"
	"time"
)

// TestWindowAt reads a weekday evening window in Paris from UTC clocks:
// open from 22:00 Paris (21:00 UTC in winter) for 4 hours, closed from
// then until the next weekday's 22:00.
func TestWindowAt(t *testing.T) {
	w := Window{Schedule: "0 22 * * 1-5", Duration: "4h", TimeZone: "Europe/Paris"}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	tests := []struct {
		now, until string
		open       bool
	}{
		{"2026-12-02T12:00:00Z", "2026-12-02T21:00:00Z", false}, // Wednesday noon: opens at 22:00 Paris
		{"2026-12-02T21:00:00Z", "2026-12-03T01:00:00Z", true},  // the opening instant
		{"2026-12-02T23:30:00Z", "2026-12-03T01:00:00Z", true},
		{"2026-12-03T01:00:00Z", "2026-12-03T21:00:00Z", false}, // closed at 02:00 Paris
		{"2026-12-05T12:00:00Z", "2026-12-07T21:00:00Z", false}, // Saturday: Monday evening
		{"2026-12-05T00:30:00Z", "2026-12-05T01:00:00Z", true},  // Friday's window runs into Saturday
	}
	for _, tc := range tests {
		open, until := w.At(utc(tc.now))
		if open != tc.open || !until.Equal(utc(tc.until)) {
			t.Errorf("At(%s) = %t until %s, want %t until %s", tc.now, open, until.UTC().Format(time.RFC3339), tc.open, tc.until)
		}
	}
	if open, until := (Window{}).At(utc("2026-12-02T12:00:00Z")); !open || !until.IsZero() {
		t.Errorf("the zero window: %t until %s, want always open", open, until)
	}
	for _, bad := range []Window{
		{Schedule: "every night", Duration: "4h"},
		{Schedule: "0 22 * * *", Duration: "-1h"},
		{Schedule: "0 22 * * *", Duration: "4h", TimeZone: "Mars/Olympus"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated; want it refused", bad)
		}
	}
}
