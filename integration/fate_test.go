//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/rollout"
)

// Issue 9's edges, where work used to be lost without a word.

// TestSmallStoreLosesNoPlan: with every stream capped at 64 KiB, an edit
// referenced by 300 VMs used to move about 80 of them, the other plans
// discarded by the size limit before the applier read them. The plans
// stream is a work queue now, which the limit does not bound: every VM
// moves, once, by the audit log.
func TestSmallStoreLosesNoPlan(t *testing.T) {
	const vms = 300
	e := newEnv(t, fleetOptions{namespaces: 3, perIT: map[string]int{itMedium: vms}})
	e.runKvlive("64 KiB streams", "--max-bytes", "65536")
	e.waitGenerations()
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	e.waitPlanned(eventID)
	edited := e.selectShapes(onInstancetype(it.Name))
	e.waitSettled("every VM pinned to the new generation", edited, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, it)
	})
	e.checkWrites(edited, nil)
	e.checkProcs()
}

// TestSlowRateCausesNoRedelivery: under --rate 0.5 with 16 workers, plans
// wait in the rate limiter far longer than the consumer's 30s AckWait.
// They used to be redelivered while the first copy still waited, each copy
// recording its own outcome; the runtime's heartbeat keeps them delivered
// once.
func TestSlowRateCausesNoRedelivery(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 24}})
	e.runKvlive("0.5 VMs/s", "--rate", "0.5", "--workers", "16")
	e.waitGenerations()
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	p := e.follow(eventID)
	for uid, outs := range e.outcomes(eventID) {
		if len(outs) != 1 || outs[0].Attempt != 1 {
			t.Errorf("VM %s: %d outcomes, first attempt %d; want one, on the first delivery", uid, len(outs), outs[0].Attempt)
		}
	}
	e.checkRecovered(it, eventID, p)
	if st := e.status(eventID); st.Phase != rollout.PhaseComplete || st.InFlight != 0 {
		t.Errorf("status after the rollout: %+v", st)
	}
}

// TestResumeReleasesEveryHeldPlan pauses an edit of 1,000 VMs ahead of
// time, so every plan is held, then resumes it: every held plan goes back
// (the release used to stop at the first fetch that waited 5s and say it
// was done), and the rollout completes.
func TestResumeReleasesEveryHeldPlan(t *testing.T) {
	const vms = 1000
	e := newEnv(t, fleetOptions{namespaces: 5, perIT: map[string]int{itMedium: vms}})
	e.runKvlive("all stages")
	e.waitGenerations()
	medium := e.instancetype(itMedium)
	next := events.EventID(events.KindClusterInstancetype, string(medium.UID), medium.Generation+1)
	if out := e.rolloutCommand("pause", next, "--ahead"); !strings.Contains(out, "paused") {
		t.Fatalf("pause --ahead printed %q", out)
	}
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	if eventID != next {
		t.Fatalf("edit made event %s, paused %s", eventID, next)
	}
	e.waitFor("every plan held", 2*time.Minute, func() (bool, string) {
		st := e.status(next)
		return st.Held == vms, fmt.Sprintf("held %d of %d", st.Held, vms)
	})
	e.rolloutCommand("resume", next)
	e.checkRecovered(it, eventID, e.follow(eventID))
	if st := e.status(eventID); st.Phase != rollout.PhaseComplete || st.Held != 0 {
		t.Errorf("status after resume: %+v", st)
	}
}

// TestSIGTERMMidRollout: a shutdown cancels in-flight writes, which used to
// be classified as permanent failures. Terminated a quarter of the way
// through, kvlive finishes what it holds or hands it back; no VM gets a
// failed outcome, and a restart finishes the rest, each VM written once.
func TestSIGTERMMidRollout(t *testing.T) {
	const vms = 1000
	e := newEnv(t, fleetOptions{namespaces: 5, perIT: map[string]int{itMedium: vms}})
	first := e.runKvlive("first", "--rate", "100")
	e.waitGenerations()
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	at := e.followUntil(eventID, quarterDone)
	first.terminate()
	if at.Done() {
		t.Fatalf("the rollout finished before SIGTERM (%d outcomes); the test proves nothing", len(at.Outcomes))
	}
	e.runKvlive("after SIGTERM", "--rate", "100")
	p := e.follow(eventID)
	for uid, outs := range e.outcomes(eventID) {
		for _, o := range outs {
			if o.Result == events.ResultFailed {
				t.Errorf("VM %s: failed outcome (%s: %s)", uid, o.Reason, o.Error)
			}
		}
	}
	e.checkRecovered(it, eventID, p)
}

// TestCorruptControlRecordConcernsOneEvent: one unreadable record in the
// rollout-control bucket used to make `kvlive events` fail for every event
// and disable pause and abort for its event. Now only that event says so,
// and --force replaces the record.
func TestCorruptControlRecordConcernsOneEvent(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 4, itSmall: 4}})
	e.runKvlive("all stages")
	e.waitGenerations()
	_, medium := e.editInstancetype(itMedium, 3, "6Gi")
	e.follow(medium)
	_, small := e.editInstancetype(itSmall, 2, "3Gi")
	e.follow(small)
	// Every VM has its outcome; KubeVirt's verdicts come a moment later
	// (the stand-in reacts as virt-controller does, after the move).
	for _, id := range []string{medium, small} {
		e.waitFor("the rollout complete, every verdict in", rolloutTimeout, func() (bool, string) {
			st := e.status(id)
			return st.Phase == rollout.PhaseComplete, string(st.Phase)
		})
	}
	kv, err := e.js.KeyValue(e.ctx, events.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.WithoutCancel(e.ctx), events.ControlKey(medium), []byte("{garbage")); err != nil {
		t.Fatal(err)
	}
	out := e.kvliveCommand(time.Minute, "events", "--nats-url", e.natsURL)
	if !strings.Contains(out, events.ShortEventID(medium)) || !strings.Contains(out, events.ShortEventID(small)) || !strings.Contains(out, "control record unreadable") {
		t.Fatalf("kvlive events with one corrupt control record:\n%s", out)
	}
	if st := e.status(small); st.ControlError != "" || st.Phase != rollout.PhaseComplete {
		t.Errorf("the other event is affected: %+v", st)
	}
	if st := e.status(medium); st.ControlError == "" {
		t.Errorf("the corrupt record is not reported: %+v", st)
	}
	if out := e.rolloutCommand("abort", medium, "--force"); !strings.Contains(out, "aborted") {
		t.Errorf("abort --force printed %q", out)
	}
}
