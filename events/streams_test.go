package events

import (
	"strings"
	"testing"
	"time"
)

// TestStreamOptionsValidate: a replay horizon shorter than the duplicate
// window is refused in the flags' words before JetStream refuses it.
func TestStreamOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		maxAge time.Duration
		want   string
	}{
		{0, ""},
		{7 * 24 * time.Hour, ""},
		{30 * time.Minute, ""},
		{10 * time.Minute, "--max-age 10m0s is shorter than the 30m0s"},
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
