//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/rollout"
)

var replayedAs = regexp.MustCompile(`replayed \S+ as (replay/\S+)`)

// replay runs `kvlive replay --event ID --apply --wait` and returns the new event's id.
func (e *env) replay(eventID string) string {
	e.t.Helper()
	out := e.kvliveCommand(rolloutTimeout, "replay", "--event", eventID, "--apply", "--wait",
		"--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig)
	m := replayedAs.FindStringSubmatch(out)
	if m == nil {
		e.t.Fatalf("kvlive replay printed no replayed event:\n%s", out)
	}
	return m[1]
}

// checkDryRun runs `kvlive replay --event ID -o json` without --apply: the
// plan the event would make today, against the real API server. VMs the
// cut-short rollout moved plan as none; the rest as their shape dictates
// (or none, for one the killed applier moved without recording it). The
// callers' write checks show it wrote nothing.
func (e *env) checkDryRun(eventID string, cut rollout.Progress, edited []vmShape) {
	e.t.Helper()
	out := e.kvliveCommand(time.Minute, "replay", "--event", eventID, "-o", "json", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig)
	var preview []struct {
		EventID string `json:"eventId"`
		Plan    struct {
			VMs []struct {
				Namespace string        `json:"namespace"`
				Name      string        `json:"name"`
				Action    events.Result `json:"action"`
			} `json:"vms"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(out), &preview); err != nil || len(preview) != 1 || preview[0].EventID != eventID {
		e.t.Fatalf("kvlive replay dry run: %v\n%s", err, out)
	}
	actions := map[string]events.Result{}
	for _, vm := range preview[0].Plan.VMs {
		actions[vm.Namespace+"/"+vm.Name] = vm.Action
	}
	var problems []string
	for _, s := range edited {
		got, ok := actions[s.key()]
		_, movedBefore := cut.Outcomes[e.uids[s.key()]]
		switch {
		case !ok:
			problems = append(problems, s.key()+": not in the dry run")
		case movedBefore && got != events.ResultNone, !movedBefore && got != s.expected() && got != events.ResultNone:
			problems = append(problems, fmt.Sprintf("%s: dry run says %s (moved before the cut: %v)", s.key(), got, movedBefore))
		}
	}
	if len(actions) != len(edited) {
		problems = append(problems, fmt.Sprintf("dry run lists %d VMs, want %d", len(actions), len(edited)))
	}
	report(e.t, "replay dry run", problems)
}

// deadLetters waits until the dead-letter stream holds n messages and returns them.
func (e *env) deadLetters(n int) []*jetstream.RawStreamMsg {
	e.t.Helper()
	var stream jetstream.Stream
	e.waitFor(plural(n, "dead letter"), 2*time.Minute, func() (bool, string) {
		var err error
		if stream, err = e.js.Stream(e.ctx, events.StreamDLQ); err != nil {
			return false, err.Error()
		}
		info, err := stream.Info(e.ctx)
		if err != nil {
			return false, err.Error()
		}
		return int(info.State.Msgs) == n, plural(int(info.State.Msgs), "dead letter")
	})
	info, _ := stream.Info(e.ctx)
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && n > 0; seq++ {
		if m, err := stream.GetMsg(e.ctx, seq); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestReplayFinishesACutShortRollout cuts a rollout short (the applier is
// killed and the remaining plans are lost), then `kvlive replay --apply`
// finishes it with no VM patched twice; replaying the finished event again
// moves nothing; a poison message published by hand meanwhile lands in the
// dead-letter stream with its reason while the pipeline goes on.
func TestReplayFinishesACutShortRollout(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 3, perIT: map[string]int{itMedium: 80, itSmall: 6}})
	e.runKvlive("watcher and planner", "--stages", "watcher,planner")
	e.waitGenerations()
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	e.waitPlanned(eventID)

	applier := e.runKvlive("applier, cut short", "--stages", "applier", "--rate", "20")
	cut := e.followUntil(eventID, quarterDone)
	applier.kill()
	plans, err := e.js.Stream(e.ctx, events.StreamPlans)
	if err != nil {
		t.Fatal(err)
	}
	if err := plans.Purge(e.ctx); err != nil { // the outage lost the plans not yet applied
		t.Fatal(err)
	}
	e.runKvlive("applier")
	t.Logf("rollout cut short after %d of %d VMs", len(cut.Outcomes), cut.Planned)

	if _, err := e.js.Publish(e.ctx, events.ChangedSubject(events.KindClusterInstancetype), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	edited, others := e.selectShapes(onInstancetype(itMedium)), e.selectShapes(onInstancetype(itSmall))
	e.checkDryRun(eventID, cut, edited)
	replayID := e.replay(eventID)
	done := e.follow(replayID)
	if len(done.Outcomes) != len(edited) {
		t.Fatalf("replay: %d outcomes, want %d", len(done.Outcomes), len(edited))
	}
	var problems []string
	for _, s := range edited {
		uid := e.uids[s.key()]
		o := done.Outcomes[uid]
		_, movedBefore := cut.Outcomes[uid]
		// A VM the killed applier was moving when it died may be at the
		// target without an outcome: its replay finds nothing to do either.
		if movedBefore && o.Result != events.ResultNone || !movedBefore && o.Result != s.expected() && o.Result != events.ResultNone {
			problems = append(problems, s.key()+": "+string(o.Result)+" ("+o.Reason+")")
		}
	}
	report(t, "replayed outcomes (moved before the cut: none; the rest: their expected result)", problems)
	if n := done.Counts()[events.ResultNone]; n >= len(edited)-5 {
		t.Errorf("the replay moved only %d VMs; the cut should have left most to move", len(edited)-n)
	}
	e.waitSettled("every edited VM at the new generation", edited, func(v clusterView, s vmShape) string { return pinProblem(v, s, it) })
	e.checkWrites(edited, others)

	letters := e.deadLetters(1)
	if reason := letters[0].Header.Get(events.HeaderDeadReason); !strings.Contains(reason, "malformed") || string(letters[0].Data) != "not an event" {
		t.Errorf("dead letter: reason %q, body %q", reason, letters[0].Data)
	}

	again := e.follow(e.replay(eventID))
	if n := again.Counts()[events.ResultNone]; n != len(edited) {
		t.Errorf("replaying a finished event: %v, want every VM none", again.Counts())
	}
	e.checkWrites(edited, others)
}

// TestDLQRetryAfterATransientFailure makes the planner fail for a cause
// that goes away (its rollout bucket is gone), so the event is dead-lettered
// after the last delivery; once the bucket is back, `kvlive dlq retry`
// sends it through again and it completes.
func TestDLQRetryAfterATransientFailure(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 8}})
	e.runKvlive("all stages")
	e.waitGenerations()
	if err := e.js.DeleteKeyValue(e.ctx, events.BucketRollouts); err != nil {
		t.Fatal(err)
	}
	_, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	letters := e.deadLetters(1)
	if reason := letters[0].Header.Get(events.HeaderDeadReason); !strings.Contains(reason, "gave up after 5 deliveries") {
		t.Fatalf("dead letter reason %q", reason)
	}
	seq := strconv.FormatUint(letters[0].Sequence, 10)
	if out := e.kvliveCommand(time.Minute, "dlq", "list", "--nats-url", e.natsURL); !strings.Contains(out, "1 dead letters") || !strings.Contains(out, "gave up after 5 deliveries") {
		t.Errorf("dlq list:\n%s", out)
	}
	if out := e.kvliveCommand(time.Minute, "dlq", "show", seq, "--nats-url", e.natsURL); !strings.Contains(out, "gave up after 5 deliveries") || !strings.Contains(out, eventID) {
		t.Errorf("dlq show %s:\n%s", seq, out)
	}
	if err := events.Setup(e.ctx, e.js, events.DefaultStreamOptions(), nil); err != nil {
		t.Fatal(err)
	}
	out := e.kvliveCommand(time.Minute, "dlq", "retry", "--all", "--nats-url", e.natsURL)
	if !strings.Contains(out, "retried") {
		t.Fatalf("dlq retry: %s", out)
	}
	e.waitPlanned(eventID)
	p := e.follow(eventID)
	if len(p.Outcomes) != len(e.selectShapes(onInstancetype(itMedium))) {
		t.Errorf("%d outcomes after the retry", len(p.Outcomes))
	}
	e.deadLetters(0)

	// A poison message nobody will retry: purge drops it.
	if _, err := e.js.Publish(e.ctx, events.PlanSubject("team-1", "poison"), []byte("poison")); err != nil {
		t.Fatal(err)
	}
	e.deadLetters(1)
	if out := e.kvliveCommand(time.Minute, "dlq", "purge", "--all", "--nats-url", e.natsURL); !strings.Contains(out, "purged") {
		t.Errorf("dlq purge printed %q", out)
	}
	e.deadLetters(0)
}
