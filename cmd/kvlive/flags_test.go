package main

import (
	"errors"
	"strings"
	"testing"
)

// TestBadFlagsAndUnknownCommandsAreErrors: values that would run a broken
// pipeline, and subcommands that do not exist, are usage errors, not
// silently accepted or answered with a help page and exit status 0.
func TestBadFlagsAndUnknownCommandsAreErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--log-level", "verbose", "version"},
		{"run", "--workers", "-5"},
		{"run", "--planner-workers", "0"},
		{"run", "--rate", "-1"},
		{"demo", "--running-percent", "150"},
		{"rollout", "stats", "x"},
		{"dlq", "shred"},
	} {
		out, err := kvlive(t, args...)
		if err == nil {
			t.Errorf("kvlive %s succeeded:\n%s", strings.Join(args, " "), out)
			continue
		}
		if !errors.Is(err, errUsage) && !strings.Contains(err.Error(), "want") {
			t.Errorf("kvlive %s: %v, want a usage error saying what is wanted", strings.Join(args, " "), err)
		}
	}
}
