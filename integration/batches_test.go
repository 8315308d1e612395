//go:build integration

package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/rollout"
)

// TestBatchedRolloutCanaryThenTenPercent rolls an edit out to 1,000 VMs
// with kvlive run's default policy: a canary of 5, then batches of 10%.
// Every VM is moved once, with its planned result; each batch starts only
// after the one before it finished (its last outcome precedes the next
// batch's first); the batches are the policy's sizes; and the trace shows
// each gated batch as a span.
func TestBatchedRolloutCanaryThenTenPercent(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: 1000}})
	e.runKvlive("all stages", "--batch-size", "10%", "--canary", "5")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	p := e.follow(eventID)
	e.checkRollout(p, rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})

	rec := e.waitPlanned(eventID)
	want := events.Policy{BatchSize: "10%", Canary: "5"}.Batches(len(edited))
	if !slices.Equal(rec.Batches, want) {
		t.Fatalf("batches %v, want %v", rec.Batches, want)
	}
	first, last := make([]time.Time, len(want)), make([]time.Time, len(want))
	sizes := make([]int, len(want))
	for _, o := range p.Outcomes {
		b := o.Batch
		sizes[b]++
		if first[b].IsZero() || o.FinishedAt.Before(first[b]) {
			first[b] = o.FinishedAt
		}
		if o.FinishedAt.After(last[b]) {
			last[b] = o.FinishedAt
		}
	}
	if !slices.Equal(sizes, want) {
		t.Errorf("outcomes per batch %v, want %v", sizes, want)
	}
	for b := 1; b < len(want); b++ {
		if !last[b-1].Before(first[b]) {
			t.Errorf("batch %d began (%s) before batch %d ended (%s)", b+1, first[b].Format(time.RFC3339Nano), b, last[b-1].Format(time.RFC3339Nano))
		}
	}
	e.waitFor("a span per gated batch in the trace", time.Minute, func() (bool, string) {
		var names []string
		for _, body := range e.streamBodies(events.StreamSpans) {
			s, err := events.UnmarshalSpan(body)
			if err == nil && s.TraceID == rec.TraceID && strings.HasPrefix(s.Name, "rollout.batch ") {
				names = append(names, s.Name)
			}
		}
		return len(names) == len(want)-1, strings.Join(names, ", ")
	})
	if st := e.status(eventID); st.Phase != rollout.PhaseComplete || st.Staged != 0 || st.Batch != len(want)-1 {
		t.Errorf("status: %s, %d staged, batch %d; want complete, none staged, the last batch released", st.Phase, st.Staged, st.Batch+1)
	}
}

// TestRealKubeVirtGateHoldsOnAPendingHotplug rolls an edit out to three
// running VMs one at a time on KubeVirt's real virt-controller, with the
// hotplugs held as on a slow node: the first batch's VM never shows the
// new sockets and memory, so its gate holds, the progress deadline passes
// and the rollout pauses with the reason (in rollout status), the other
// two VMs untouched. Once the hotplugs may finish, rollout promote
// releases the next batch and the rollout completes, gate by gate.
func TestRealKubeVirtGateHoldsOnAPendingHotplug(t *testing.T) {
	e := newKubeVirtEnv(t)
	e.createInstancetype("u1.medium", 2, "2Gi")
	names := []string{"live-0", "live-1", "live-2"}
	e.createVMs("u1.medium", kvVM{name: names[0], running: true}, kvVM{name: names[1], running: true}, kvVM{name: names[2], running: true})
	e.runKvlive("all stages", "--batch-size", "1", "--progress-deadline", "30s", "--observe-timeout", "20s")
	e.waitWatched(1)

	e.kv.Handler.Hold()
	id := e.editInstancetypeTo("u1.medium", 4, "4Gi")
	var st rollout.Account
	e.waitFor("the gate to pause the rollout at its deadline", kvTimeout, func() (bool, string) {
		st = e.status(id)
		return st.Phase == rollout.PhasePaused, string(st.Phase) + ": " + st.Control.Reason
	})
	for _, want := range []string{"batch 1 of 3: progress deadline 30s passed", "hotplug pending"} {
		if !strings.Contains(st.Control.Reason, want) {
			t.Errorf("paused for %q, want it to say %q", st.Control.Reason, want)
		}
	}
	if st.Staged != 2 || st.Outcomes[events.ResultLive] != 1 || st.Control.By != "kvlive gate" {
		t.Errorf("paused with %d staged, outcomes %v, by %q; want 2 staged, 1 live, by the gate", st.Staged, st.Outcomes, st.Control.By)
	}
	if out := e.kvliveCommand(time.Minute, "rollout", "status", id, "--nats-url", e.nats.URL); !strings.Contains(out, "batches:      1 of 3 released") {
		t.Errorf("rollout status does not show the batches:\n%s", out)
	}

	e.kv.Handler.Release()
	if out := e.rolloutCommand("promote", id); !strings.Contains(out, "batch 2 of 3 released (1 VMs)") {
		t.Errorf("promote said %q", out)
	}
	p := e.follow(id)
	e.checkResults(p, map[string]events.Result{names[0]: events.ResultLive, names[1]: events.ResultLive, names[2]: events.ResultLive})
	e.checkAgainstKubeVirt(p, names)
	if _, _, err := e.kvliveOnce(time.Minute, "rollout", "promote", id, "--nats-url", e.nats.URL); err == nil {
		t.Error("promote of a rollout with every batch released succeeded")
	}
}
