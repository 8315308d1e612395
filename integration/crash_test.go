//go:build integration

package integration

import (
	"testing"
	"time"

	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/rollout"
)

// TestKillMidRollout SIGKILLs kvlive a quarter of the way through a
// rate-limited rollout of 2,000 VMs and starts it again on the same NATS
// server. Every VM must reach the target with one outcome per event (a VM
// may have a second, agreeing outcome from a redelivery), and the audit log
// must show kvlive patched no VM twice. Every moved VM must still get
// exactly one verdict: those the killed process awaited are carried on by
// the next one.
func TestKillMidRollout(t *testing.T) {
	const vms = 2000
	e := newEnv(t, fleetOptions{namespaces: 5, perIT: map[string]int{itMedium: vms}})
	first := e.runKvlive("first", "--rate", "150", "--observe-timeout", verdictDeadline)
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	at := e.followUntil(eventID, quarterDone)
	first.kill()
	if at.Done() {
		t.Fatalf("the rollout finished before kvlive was killed (%d outcomes); the test proves nothing", len(at.Outcomes))
	}
	t.Logf("killed kvlive with %d of %d outcomes recorded", len(at.Outcomes), at.Planned)
	e.runKvlive("after the kill", "--rate", "150", "--observe-timeout", verdictDeadline)

	e.checkRecovered(it, eventID, e.follow(eventID))
	e.checkVerdicts(eventID, 3*time.Minute)
}

// verdictDeadline is the verdict deadline of the tests that kill kvlive:
// short, so what the killed process awaited comes back to the next one
// (after twice the deadline) well within the test.
const verdictDeadline = "10s"

// natsOutage is how long TestNATSRestartMidRollout keeps NATS down: longer
// than the NATS client's 5-second JetStream publish timeout, so an outcome
// being published when the server went away times out in kvlive and its
// plan is nak'ed and delivered again: the redelivery path runs. (The
// outcome itself usually still reaches the stream from the client's
// reconnect buffer, which leaves that VM two agreeing outcomes.)
const natsOutage = 8 * time.Second

// TestNATSRestartMidRollout stops the NATS server a quarter of the way
// through a rate-limited rollout, keeps it down a few seconds, and starts it
// again on the same store. kvlive keeps running: the rollout must complete
// with every VM at the target, an outcome for each, and no VM patched twice.
func TestNATSRestartMidRollout(t *testing.T) {
	const vms = 1000
	e := newEnv(t, fleetOptions{namespaces: 5, perIT: map[string]int{itMedium: vms}})
	e.runKvlive("all stages", "--rate", "100")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	at := e.followUntil(eventID, quarterDone)
	e.nats.Stop()
	if at.Done() {
		t.Fatalf("the rollout finished before NATS stopped (%d outcomes); the test proves nothing", len(at.Outcomes))
	}
	t.Logf("stopped NATS with %d of %d outcomes recorded", len(at.Outcomes), at.Planned)
	time.Sleep(natsOutage) // nothing is measured against it
	e.nats.Start()

	e.checkRecovered(it, eventID, e.follow(eventID))
}

// quarterDone holds once a quarter of the planned VMs have an outcome.
func quarterDone(p rollout.Progress) bool {
	return p.Planned > 0 && len(p.Outcomes)*4 >= p.Planned
}

// checkRecovered asserts an interrupted rollout of it's edit completed:
// every VM planned once, its outcomes all agreeing with its plan, pinned to
// the new generation (the stand-in agreeing), and written exactly once.
func (e *env) checkRecovered(it *v1beta1.VirtualMachineClusterInstancetype, eventID string, p rollout.Progress) {
	e.t.Helper()
	edited := e.selectShapes(onInstancetype(it.Name))
	e.checkRollout(p, rolloutWant{
		eventID:  eventID,
		shapes:   edited,
		action:   vmShape.expected,
		revision: revisionOf(it),
	})
	e.waitSettled("every VM pinned to the new generation", edited, func(v clusterView, s vmShape) string {
		if prob := pinProblem(v, s, it); prob != "" {
			return prob
		}
		return standinProblem(v, s, p.Outcomes[e.uids[s.key()]].Result, it.Spec)
	})
	e.checkWrites(edited, nil)
	redelivered := 0
	for _, outs := range e.outcomes(eventID) {
		if len(outs) > 1 {
			redelivered++
		}
	}
	e.t.Logf("results %v; %s with more than one outcome", p.Counts(), plural(redelivered, "VM"))
}
