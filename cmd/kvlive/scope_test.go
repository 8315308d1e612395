package main

import (
	"strings"
	"testing"
)

// TestScopeShowsAndClearsTheClaim: kvlive scope shows which scope the bus
// serves; --clear clears it (no replica runs on a data dir), after which
// the bus is unclaimed; --force alone is a usage error.
func TestScopeShowsAndClearsTheClaim(t *testing.T) {
	dir := recordedStore(t)
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"scope"}, "this bus serves every namespace (claimed by"},
		{[]string{"scope", "--clear"}, "cleared: the bus served every namespace"},
		{[]string{"scope"}, "unclaimed: the next kvlive run claims this bus"},
	} {
		out, err := kvlive(t, append(step.args, "--data-dir", dir)...)
		if err != nil || !strings.Contains(out, step.want) {
			t.Errorf("kvlive %s: %v\n%s\nwant %q", strings.Join(step.args, " "), err, out, step.want)
		}
	}
	if _, err := kvlive(t, "scope", "--force", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "--force goes with --clear") {
		t.Errorf("scope --force: %v, want a usage error", err)
	}
}
