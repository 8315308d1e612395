package main

import (
	"strings"
	"testing"
)

// TestRolloutCommandsRefuseUnknownEvents: a typo never answers "paused"
// while the real rollout goes on; pausing ahead of an event says so.
func TestRolloutCommandsRefuseUnknownEvents(t *testing.T) {
	dir := recordedStore(t)
	if out, err := kvlive(t, "rollout", "pause", "typo-id", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "no rollout") ||
		!strings.Contains(err.Error(), "--ahead") {
		t.Fatalf("pause of an unknown id: %v\n%s", err, out)
	}
	if _, err := kvlive(t, "rollout", "status", "typo-id", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "no rollout") {
		t.Fatalf("status of an unknown id: %v", err)
	}
	if _, err := kvlive(t, "rollout", "resume", "typo-id", "--data-dir", dir); err == nil {
		t.Fatal("resume of an unknown id succeeded")
	}
	out, err := kvlive(t, "rollout", "pause", "VirtualMachineClusterInstancetype/uid/9", "--ahead", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "paused") {
		t.Fatalf("pause --ahead: %v\n%s", err, out)
	}
	if out, err := kvlive(t, "rollout", "status", "VirtualMachineClusterInstancetype/uid/9", "--data-dir", dir); err != nil || !strings.Contains(out, "pending") {
		t.Fatalf("status of a rollout paused ahead: %v\n%s", err, out)
	}
}

// TestEventIDsTakeAUniquePrefix: nobody should have to type a 72-character
// id; a prefix of two recorded ids is an error that lists them.
func TestEventIDsTakeAUniquePrefix(t *testing.T) {
	dir := recordedStore(t)
	prefix := testEvent[:12]
	for _, args := range [][]string{
		{"trace", prefix, "--color", "never"},
		{"outcomes", "--event", prefix},
		{"rollout", "status", prefix},
	} {
		out, err := kvlive(t, append(args, "--data-dir", dir)...)
		if err != nil || !strings.Contains(out, "web-1") && !strings.Contains(out, testEvent) {
			t.Errorf("kvlive %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := kvlive(t, "rollout", "pause", testEvent[:3]+"x", "--data-dir", dir); err == nil {
		t.Error("pause of a prefix that matches nothing succeeded")
	}
}
