package applier

import (
	"testing"
	"time"
)

func TestActivityIsBusyWithAPlanInHandAndJustAfter(t *testing.T) {
	var a Activity
	now := time.Now()
	if a.Busy(now) {
		t.Fatal("a new activity is busy")
	}
	a.begin()
	if !a.Busy(now.Add(time.Hour)) {
		t.Fatal("not busy with a plan in hand")
	}
	a.end(now)
	if !a.Busy(now.Add(activityLinger / 2)) {
		t.Fatal("idle right after a plan: a rollout between two fetches would look idle")
	}
	if a.Busy(now.Add(activityLinger)) {
		t.Fatalf("busy %v after the last plan", activityLinger)
	}
	var none *Activity
	none.begin()
	none.end(now)
	if none.Busy(now) {
		t.Fatal("a nil activity is busy")
	}
}
