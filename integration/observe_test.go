//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
	"kvlive/rollout"
)

// followSlice is how long one rollout.Follow call may run before the test
// checks that its kvlive processes are alive and follows again.
const followSlice = 10 * time.Second

// follow waits until every VM planned for eventID has an outcome, through
// rollout.Follow. A Follow that fails (NATS restarting) or outlives its
// slice is started again; each start reads the outcomes from the beginning.
func (e *env) follow(eventID string) rollout.Progress {
	e.t.Helper()
	return e.followUntil(eventID, func(p rollout.Progress) bool { return p.Done() })
}

// followUntil follows eventID until stop holds for the progress seen, or
// the rollout is done.
func (e *env) followUntil(eventID string, stop func(rollout.Progress) bool) rollout.Progress {
	e.t.Helper()
	within := rolloutTimeout
	if e.followTimeout > 0 {
		within = e.followTimeout
	}
	deadline := time.Now().Add(within)
	var last rollout.Progress
	for {
		slice := followSlice
		if e.followSlice > 0 {
			slice = e.followSlice
		}
		ctx, cancel := context.WithTimeout(e.ctx, slice)
		p, err := rollout.Follow(ctx, e.js, eventID, func(p rollout.Progress) {
			if stop(p) {
				cancel()
			}
		})
		cancel()
		last = p
		if err == nil || stop(p) {
			return p
		}
		e.checkProcs()
		if time.Now().After(deadline) {
			e.t.Fatalf("rollout %s: %d of %d outcomes after %v (last error: %v)", eventID, len(last.Outcomes), last.Planned, within, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			e.t.Logf("following %s: %v; following again", eventID, err)
			time.Sleep(time.Second)
		}
	}
}

// waitPlanned waits for the planner's rollout record of eventID, which it
// writes once every plan of the event is stored.
func (e *env) waitPlanned(eventID string) events.Rollout {
	e.t.Helper()
	var r events.Rollout
	e.waitFor("the rollout record of "+eventID, time.Minute, func() (bool, string) {
		kv, err := e.js.KeyValue(e.ctx, events.BucketRollouts)
		if err != nil {
			return false, err.Error()
		}
		entry, err := kv.Get(e.ctx, events.RolloutKey(eventID))
		if err != nil {
			return false, err.Error()
		}
		if r, err = events.UnmarshalRollout(entry.Value()); err != nil {
			e.t.Fatal(err)
		}
		return true, ""
	})
	return r
}

// plans returns eventID's plans, as published to KVLIVE_PLANS, by VM UID, failing on a
// VM planned twice. A plan held by a pause and released is the very same
// message again, byte for byte, which is no second plan.
func (e *env) plans(eventID string) map[string]events.Plan {
	e.t.Helper()
	out := map[string]events.Plan{}
	bodies := map[string][]byte{}
	for _, body := range e.plansTap.all() {
		var p events.Plan
		if _, err := events.Decode(body, events.TypePlan, &p); err != nil {
			e.t.Fatalf("plans stream: %v", err)
		}
		if p.EventID != eventID {
			continue
		}
		if first, dup := bodies[p.VM.UID]; dup && !bytes.Equal(first, body) {
			e.t.Errorf("VM %s planned twice for %s", p.VM, eventID)
		}
		out[p.VM.UID], bodies[p.VM.UID] = p, body
	}
	return out
}

// outcomes returns every outcome of eventID in KVLIVE_OUTCOMES by VM UID,
// in stream order: after a crash or a lost ack a VM may have more than one.
func (e *env) outcomes(eventID string) map[string][]events.Outcome {
	e.t.Helper()
	out := map[string][]events.Outcome{}
	for _, body := range e.streamBodies(events.StreamOutcomes, events.OutcomesIn("")) {
		var o events.Outcome
		if _, err := events.Decode(body, events.TypeOutcome, &o); err != nil {
			e.t.Fatalf("outcomes stream: %v", err)
		}
		if o.EventID == eventID {
			out[o.VM.UID] = append(out[o.VM.UID], o)
		}
	}
	return out
}

// streamBodies reads every message a stream holds now under the subject
// filters (all when none), oldest first (bus.Scan, as kvlive's own reads: a
// NATS leader election midway is ridden out).
func (e *env) streamBodies(name string, filters ...string) [][]byte {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	var bodies [][]byte
	if err := bus.Scan(ctx, e.js, name, jetstream.OrderedConsumerConfig{FilterSubjects: filters}, func(m jetstream.Msg) {
		bodies = append(bodies, m.Data())
	}); err != nil {
		e.t.Fatalf("stream %s: read %d messages: %v", name, len(bodies), err)
	}
	return bodies
}

// plural renders a count with its noun.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// checkVerdicts waits until every VM the rollout of eventID moved has
// KubeVirt's verdict stored, and checks there is exactly one per VM, that
// it is what the VM's latest outcome predicted (the controller, KubeVirt's
// or the stand-in, agrees with kvlive's model), and that no VM that did not
// move got one.
func (e *env) checkVerdicts(eventID string, within time.Duration) {
	e.t.Helper()
	moved := map[string]events.Outcome{}
	for uid, outs := range e.outcomes(eventID) {
		if last := outs[len(outs)-1]; last.Result.Moves() {
			moved[uid] = last
		}
	}
	var verdicts map[string][]events.Verdict
	e.waitFor("a verdict on every moved VM", within, func() (bool, string) {
		verdicts = map[string][]events.Verdict{}
		for _, body := range e.streamBodies(events.StreamOutcomes, events.VerdictsOf(eventID)) {
			var v events.Verdict
			if _, err := events.Decode(body, events.TypeVerdict, &v); err != nil {
				e.t.Fatalf("verdicts: %v", err)
			}
			verdicts[v.VM.UID] = append(verdicts[v.VM.UID], v)
		}
		return len(verdicts) >= len(moved), fmt.Sprintf("%d of %d moved VMs have a verdict", len(verdicts), len(moved))
	})
	for uid, vs := range verdicts {
		o, ok := moved[uid]
		switch {
		case !ok:
			e.t.Errorf("VM %s did not move, yet has a verdict: %+v", vs[0].VM, vs[0])
		case len(vs) != 1:
			e.t.Errorf("VM %s has %d verdicts, want exactly one", o.VM, len(vs))
		case !vs[0].Observed.Matches(o.Result):
			e.t.Errorf("VM %s: KubeVirt's verdict %s (%s; %s), kvlive predicted %s (%s)",
				o.VM, vs[0].Observed, vs[0].Reason, vs[0].Message, o.Result, o.Reason)
		}
	}
	e.t.Logf("%d verdicts, one per moved VM", len(verdicts))
}
