package main

import (
	"strings"
	"testing"

	"kvlive/events"
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
	out, err := kvlive(t, "rollout", "pause", "VirtualMachineClusterInstancetype/3f0c2e7a-9d1b-4c5e-8a6f-2b7d9e1c4a50/9", "--ahead", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "paused") {
		t.Fatalf("pause --ahead: %v\n%s", err, out)
	}
	if out, err := kvlive(t, "rollout", "status", "VirtualMachineClusterInstancetype/3f0c2e7a-9d1b-4c5e-8a6f-2b7d9e1c4a50/9", "--data-dir", dir); err != nil || !strings.Contains(out, "pending") {
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

// TestRolloutStatusWatch: --watch on a finished rollout returns at once;
// on one that never finishes it prints its progress and gives up at
// --timeout, saying the rollout goes on.
func TestRolloutStatusWatch(t *testing.T) {
	dir := recordedStore(t)
	js, closeStore := openStore(t, dir)
	kv, err := js.KeyValue(t.Context(), events.BucketRollouts)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := events.MarshalRollout(events.Rollout{EventID: "switch/unfinished", Planned: 3, Counts: map[events.Result]int{events.ResultLive: 3}})
	if _, err := kv.Put(t.Context(), events.RolloutKey("switch/unfinished"), rec); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"a", "b", "c"} { // in flight: no applier takes them
		plan := events.Plan{EventID: "switch/unfinished", VM: events.VMRef{Namespace: "shop", Name: uid, UID: uid}, Action: events.ResultLive,
			Target: events.Target{Move: events.MoveSwitch, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}}}
		publish(t, js, events.PlanSubject("shop", plan.EventID), events.PlanID(plan.EventID, uid), events.TypePlan, &plan)
	}
	queued := events.SwitchRequest{ID: "queued", From: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"},
		To: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}}
	publish(t, js, events.SwitchSubject(), "switch/queued", events.TypeSwitchRequested, &queued)
	closeStore()

	// A switch just requested, not planned yet, is pending, not unknown.
	if out, err := kvlive(t, "rollout", "status", "switch/queued", "--data-dir", dir); err != nil || !strings.Contains(out, "pending") {
		t.Errorf("status of a queued switch: %v\n%s", err, out)
	}
	out, err := kvlive(t, "rollout", "status", testEvent, "--watch", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "complete") {
		t.Errorf("--watch on a complete rollout: %v\n%s", err, out)
	}
	out, err = kvlive(t, "rollout", "status", "switch/unf", "--watch", "--timeout", "1s", "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "--timeout 1s passed") || !strings.Contains(err.Error(), "rollout switch/unfinished goes on") {
		t.Errorf("--watch on a rollout that does not finish: %v", err)
	}
	if !strings.Contains(out, "[····················] 0/3 settled · running") {
		t.Errorf("no progress line:\n%s", out)
	}
	if _, err := kvlive(t, "rollout", "status", testEvent, "--watch", "--timeout", "0s", "--data-dir", dir); err == nil {
		t.Error("--timeout 0s accepted")
	}
}

// TestFinishedRolloutsAndBadIDsAreRefused: pausing or aborting a rollout
// that moves nothing any more is refused (the record would claim a pause
// of nothing); --ahead takes only an id an event can have; outcomes of an
// event kvlive never heard of is an error, not "no outcomes found".
func TestFinishedRolloutsAndBadIDsAreRefused(t *testing.T) {
	dir := recordedStore(t)
	for _, action := range []string{"pause", "abort"} {
		if out, err := kvlive(t, "rollout", action, testEvent, "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "is complete") {
			t.Errorf("%s of a complete rollout: %v\n%s", action, err, out)
		}
	}
	for _, id := range []string{"u1.medium", "switch/0b5c", "VirtualMachineClusterInstancetype/uid/zero"} {
		if out, err := kvlive(t, "rollout", "pause", id, "--ahead", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "event id") {
			t.Errorf("pause --ahead %s: %v\n%s", id, err, out)
		}
	}
	if out, err := kvlive(t, "outcomes", "--event", "switch/no-such-event", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "no rollout") {
		t.Errorf("outcomes of an unknown event: %v\n%s", err, out)
	}
}
