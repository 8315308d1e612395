package events

import (
	"strings"
	"testing"
	"time"
)

// TestStreamOptionsValidate: a negative replay horizon is refused in the
// flags' words; one shorter than the duplicate window is not (the spans
// stream, the only one with an age limit, recognises duplicates for that
// long).
func TestStreamOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		maxAge time.Duration
		want   string
	}{
		{0, ""},
		{7 * 24 * time.Hour, ""},
		{30 * time.Minute, ""},
		{10 * time.Minute, ""},
		{time.Second, ""},
		{-time.Hour, "--max-age -1h0m0s: want 0"},
	} {
		o := DefaultStreamOptions()
		o.MaxAge = tc.maxAge
		err := o.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("max age %v: %v", tc.maxAge, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("max age %v: %v, want %q", tc.maxAge, err, tc.want)
		}
	}
}
