//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/rollout"
)

// proofHorizon is the --max-age of TestRolloutPromisesAllAtOnce: short, so
// a pause outlasts it.
const proofHorizon = 20 * time.Second

// TestRolloutPromisesAllAtOnce keeps every promise of a batched rollout
// through everything at once, on the real servers: an edit of 1,000 VMs in
// batches after a canary, three `kvlive run` replicas on a three-node NATS
// cluster with a 20-second --max-age, and, while it runs, a replica
// SIGKILLed mid-batch, the plans stream's leader SIGKILLed, the event
// delivered again, a user switching 10 of the VMs to another instance type,
// and a pause that outlasts --max-age. The audit log shows every VM written
// at most once, the 10 switched VMs never, no VM of a batch written before
// the previous batch's last write; rollout status ends complete, its counts
// those of the audit log; a horizon after, the records age out.
func TestRolloutPromisesAllAtOnce(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: 1000}, natsCluster: 3})
	args := []string{"--replicas", "3", "--leader-elect", "--canary", "10", "--batch-size", "20%", "--rate", "8",
		"--max-age", proofHorizon.String()}
	replicas := map[string]*kvliveProc{}
	for _, name := range []string{"a", "b", "c"} {
		replicas[name] = e.runKvlive("replica "+name, args...)
	}
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	rec := e.waitPlanned(eventID)
	vms, ok, err := rollout.PlannedVMs(e.ctx, e.js, rec)
	if err != nil || !ok {
		t.Fatalf("the rollout's VM list: %v (kept: %v)", err, ok)
	}
	batchOf := map[string]int{}
	for _, vm := range vms {
		batchOf[vm.Namespace+"/"+vm.Name] = vm.Batch
	}
	e.followUntil(eventID, func(p rollout.Progress) bool { return len(p.Outcomes) >= 30 })

	replicas["b"].kill() // mid-batch: the canary passed, batch 2 is moving
	leader := e.streamLeader(events.StreamPlans)
	leader.Kill()
	e.waitFor("another node to lead the plans stream", time.Minute, func() (bool, string) {
		name, err := e.streamLeaderName(events.StreamPlans)
		return err == nil && name != "" && name != leader.Name, fmt.Sprintf("leader %q (%v)", name, err)
	})
	leader.Start()
	replicas["b"] = e.runKvlive("replica b, restarted", args...)
	e.deliverAgain(eventID)

	// A user moves 10 VMs of the last batch to another instance type.
	var switched, moved []vmShape
	for _, s := range edited {
		if batchOf[s.key()] == len(rec.Batches)-1 && len(switched) < 10 {
			e.switchAway(s, itSmall)
			switched = append(switched, s)
			continue
		}
		moved = append(moved, s)
	}

	at := e.followUntil(eventID, func(p rollout.Progress) bool { return len(p.Outcomes) >= 400 })
	e.rolloutCommand("pause", eventID, "--reason", "looking")
	time.Sleep(2*proofHorizon + rollout.KeepEvery(proofHorizon)) // the pause outlasts --max-age
	if st := e.status(eventID); st.Phase != rollout.PhasePaused || !st.Recorded || len(at.Outcomes) >= len(edited) {
		t.Fatalf("after a pause past --max-age: %s, recorded %v, %d of %d outcomes; want it paused, its record kept, VMs left",
			st.Phase, st.Recorded, len(at.Outcomes), len(edited))
	}
	e.rolloutCommand("resume", eventID)
	p := e.follow(eventID)
	var st rollout.Account
	e.waitFor("rollout status complete", time.Minute, func() (bool, string) {
		st = e.status(eventID)
		return st.Phase == rollout.PhaseComplete, string(st.Phase)
	})

	outs := e.outcomes(eventID)
	e.checkWrites(moved, switched)
	e.checkBatchOrder(batchOf)
	e.checkCountsMatchAudit(st, p, outs, switched)
	e.waitSettled("every moved VM pinned to the new generation", moved, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, it)
	})
	e.waitFor("the settled rollout's records to age out", 2*time.Minute, func() (bool, string) {
		out, stderr, err := e.kvliveOnce(time.Minute, "rollout", "status", eventID, "--nats-url", e.natsURL)
		return err != nil && strings.Contains(stderr.String(), "no rollout"), out + stderr.String()
	})
	e.checkProcs()
}

// deliverAgain stores the event once more, as a publish retried after the
// duplicate window would: the planner gets the same event id again.
func (e *env) deliverAgain(eventID string) {
	e.t.Helper()
	s, err := e.js.Stream(e.ctx, events.StreamEvents)
	if err != nil {
		e.t.Fatal(err)
	}
	var orig *jetstream.RawStreamMsg
	e.waitFor("the event in the events stream", time.Minute, func() (bool, string) {
		orig, err = s.GetLastMsgForSubject(e.ctx, events.ChangedSubject(events.KindClusterInstancetype))
		return err == nil && orig.Header.Get(jetstream.MsgIDHeader) == eventID, fmt.Sprint(err)
	})
	m := nats.NewMsg(orig.Subject)
	m.Header, m.Data = orig.Header, orig.Data
	m.Header.Set(jetstream.MsgIDHeader, eventID+"/again")
	if _, err := e.js.PublishMsg(e.ctx, m); err != nil {
		e.t.Fatal(err)
	}
}

// checkBatchOrder asserts, from the audit log, that no VM of a batch was
// written before the last write of the batch before it: a batch moves
// only once the one before it passed its gate.
func (e *env) checkBatchOrder(batchOf map[string]int) {
	e.t.Helper()
	first, last := map[int]time.Time{}, map[int]time.Time{}
	for _, ev := range e.kvlivePatches() {
		if ev.ResponseStatus.Code != 200 {
			continue
		}
		b, ok := batchOf[ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name]
		if !ok {
			continue
		}
		if f, seen := first[b]; !seen || ev.Received.Before(f) {
			first[b] = ev.Received
		}
		if ev.Done.After(last[b]) {
			last[b] = ev.Done
		}
	}
	var problems []string
	for b := 1; b <= len(first); b++ {
		f, ok := first[b]
		if ok && !last[b-1].Before(f) {
			problems = append(problems, fmt.Sprintf("batch %d's first write (%s) came before batch %d's last (%s)",
				b+1, f.Format(time.RFC3339Nano), b, last[b-1].Format(time.RFC3339Nano)))
		}
	}
	report(e.t, "batches written out of order (audit log)", problems)
}

// checkCountsMatchAudit asserts that rollout status counts what the audit
// log shows: as many VMs moved (live, restart, next-boot) as kvlive wrote,
// and the switched VMs skipped, naming what they reference. Each VM
// written has an outcome saying kvlive moved it: written by this delivery,
// or found at its target, moved by an earlier attempt (one whose replica
// was killed before its outcome was stored).
func (e *env) checkCountsMatchAudit(st rollout.Account, p rollout.Progress, outs map[string][]events.Outcome, switched []vmShape) {
	e.t.Helper()
	writes := e.kvliveWrites()
	written := 0
	for key, w := range writes {
		if w.applied() == 0 {
			continue
		}
		written++
		o, ok := p.Outcomes[e.uids[key]]
		if !ok || (!o.Wrote && !strings.Contains(o.Reason, "an earlier attempt moved it")) {
			e.t.Errorf("%s: written (audit log), its outcome %+v does not say kvlive moved it", key, o)
		}
	}
	moved := st.Outcomes[events.ResultLive] + st.Outcomes[events.ResultRestart] + st.Outcomes[events.ResultNextBoot]
	total := 0
	for _, n := range st.Outcomes {
		total += n
	}
	if moved != written || total != st.Planned || st.Outcomes[events.ResultSkip] != len(switched) {
		e.t.Errorf("status counts %v of %d planned (%d moved); the audit log shows %d VMs written, %d switched away",
			st.Outcomes, st.Planned, moved, written, len(switched))
	}
	for _, s := range switched {
		o := outs[e.uids[s.key()]]
		if len(o) == 0 || o[len(o)-1].Result != events.ResultSkip || !strings.Contains(o[len(o)-1].Reason, itSmall) {
			e.t.Errorf("%s, switched to %s by a user: outcomes %+v, want skip naming it", s.key(), itSmall, o)
		}
	}
}
