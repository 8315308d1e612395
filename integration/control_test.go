//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/rollout"
)

// status runs `kvlive rollout status -o json`.
func (e *env) status(eventID string) rollout.Account {
	e.t.Helper()
	var st rollout.Account
	out := e.kvliveCommand(time.Minute, "rollout", "status", eventID, "--nats-url", e.natsURL, "-o", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		e.t.Fatalf("kvlive rollout status: %v\n%s", err, out)
	}
	return st
}

func (e *env) rolloutCommand(action, eventID string, extra ...string) string {
	e.t.Helper()
	return e.kvliveCommand(time.Minute, append([]string{"rollout", action, eventID, "--nats-url", e.natsURL}, extra...)...)
}

// TestPauseResumeAndAbort drives rollouts with `kvlive rollout` against the
// kvlive binary on the real servers. An edit rolling out at 5 VMs/s is
// paused part-way: every plan ends either carried out or held, and the VMs
// whose plans are held stay on their old pin; resume finishes the rollout
// with every VM written exactly once. A second edit, paused before it
// happens, is aborted once all its plans are held: every VM is skipped with
// the operator's reason and none is written.
func TestPauseResumeAndAbort(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 100, itSmall: 40}})
	e.runKvlive("all stages, 5 VMs/s", "--rate", "5", "--workers", "4")
	e.waitGenerations()

	before := e.instancetype(itMedium)
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	medium := e.selectShapes(onInstancetype(itMedium))
	e.followUntil(eventID, func(p rollout.Progress) bool { return len(p.Outcomes) >= 10 })
	if out := e.rolloutCommand("pause", eventID, "--reason", "checking the first VMs"); !strings.Contains(out, "paused") {
		t.Fatalf("kvlive rollout pause printed %q", out)
	}
	var st rollout.Account
	e.waitFor("every plan carried out or held", time.Minute, func() (bool, string) {
		st = e.status(eventID)
		done := 0
		for _, n := range st.Outcomes {
			done += n
		}
		return st.Recorded && done+st.Held == st.Planned, fmt.Sprintf("planned %d, outcomes %d, held %d", st.Planned, done, st.Held)
	})
	if st.Control.State != events.StatePaused || st.Control.Reason != "checking the first VMs" || st.Held == 0 {
		t.Fatalf("status after the pause: %+v; want paused with plans held", st)
	}
	outs := e.outcomes(eventID)
	v := e.view()
	stillOld := 0
	for _, s := range medium {
		if len(outs[e.uids[s.key()]]) > 0 {
			continue
		}
		if p := pinProblem(v, s, before); p != "" {
			t.Errorf("%s moved while its plan was held: %s", s.key(), p)
		}
		stillOld++
	}
	if stillOld != st.Held {
		t.Errorf("%d VMs without an outcome, %d plans held", stillOld, st.Held)
	}

	if out := e.rolloutCommand("resume", eventID); !strings.Contains(out, "running") {
		t.Fatalf("kvlive rollout resume printed %q", out)
	}
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: medium, action: vmShape.expected, revision: revisionOf(it), clean: true})
	e.waitSettled("every edited VM pinned to the new generation", medium, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, it)
	})
	if st := e.status(eventID); st.Held != 0 || st.Control.State != events.StateRunning {
		t.Errorf("status after resume: %+v", st)
	}
	e.waitFor("the held VMs' hold spans in kvlive trace", time.Minute, func() (bool, string) {
		tree := e.kvliveCommand(time.Minute, "trace", eventID, "--nats-url", e.natsURL, "--color", "never")
		n := strings.Count(tree, "applier.hold ")
		return n >= stillOld, fmt.Sprintf("%d hold spans, %d VMs were held", n, stillOld)
	})

	// Abort, ahead of time: the next edit of u1.small is generation+1.
	small := e.instancetype(itSmall)
	next := events.EventID(events.KindClusterInstancetype, string(small.UID), small.Generation+1)
	e.rolloutCommand("pause", next, "--ahead")
	_, smallEvent := e.editInstancetype(itSmall, 2, "3Gi")
	if smallEvent != next {
		t.Fatalf("edit made event %s, paused %s", smallEvent, next)
	}
	smalls := e.selectShapes(onInstancetype(itSmall))
	e.waitFor("every plan of the paused edit held", time.Minute, func() (bool, string) {
		st := e.status(next)
		return st.Held == len(smalls), fmt.Sprintf("held %d of %d", st.Held, len(smalls))
	})
	if out := e.rolloutCommand("abort", next, "--reason", "wrong size"); !strings.Contains(out, "aborted") {
		t.Fatalf("kvlive rollout abort printed %q", out)
	}
	e.checkRollout(e.follow(next), rolloutWant{eventID: next, shapes: smalls, action: vmShape.expected, clean: true,
		outcome: func(vmShape) (events.Result, string) { return events.ResultSkip, "wrong size" }})
	e.waitSettled("aborted VMs still on their old pin", smalls, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, small)
	})
	if out := e.kvliveCommand(time.Minute, "events", "--nats-url", e.natsURL); !strings.Contains(out, "skip), aborted") {
		t.Errorf("kvlive events does not mark the aborted rollout:\n%s", out)
	}
	e.checkWrites(medium, smalls)
	out, err := exec.CommandContext(e.ctx, kvliveBin, "rollout", "resume", next, "--nats-url", e.natsURL).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "aborted rollout cannot resume") {
		t.Errorf("resuming an aborted rollout: %v, %q; want a refusal", err, out)
	}
}
