package inspect

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

// TestStatusSaysWhichStreamDroppedRecords: an incomplete rollout whose
// records a full stream dropped says so and what to raise, rather than
// only counting the VMs unaccounted for.
func TestStatusSaysWhichStreamDroppedRecords(t *testing.T) {
	a := rollout.Account{EventID: "switch/x", Phase: rollout.PhaseIncomplete, Recorded: true, Planned: 1000, Unaccounted: 949,
		Dropped: []string{"KVLIVE_OUTCOMES (max bytes 16384, holding 16000)"}}
	var out bytes.Buffer
	if err := WriteStatus(&out, a, printer.FormatTable); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"949 VMs unaccounted for", "KVLIVE_OUTCOMES (max bytes 16384", "--max-bytes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not say %q:\n%s", want, out.String())
		}
	}
}

// TestStatusSaysARolloutSettled: a rollout its keeper marked settled says
// when, and that its plans move no VM until a dlq retry reopens it.
func TestStatusSaysARolloutSettled(t *testing.T) {
	at := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	a := rollout.Account{EventID: "switch/x", Phase: rollout.PhaseComplete, Recorded: true, Planned: 2,
		Outcomes: map[events.Result]int{events.ResultLive: 2}, Control: events.Control{State: events.StateRunning, Settled: at}}
	var out bytes.Buffer
	if err := WriteStatus(&out, a, printer.FormatTable); err != nil {
		t.Fatal(err)
	}
	if want := "settled:      2026-12-01T21:00:00Z; a plan of it moves no VM now"; !strings.Contains(out.String(), want) {
		t.Errorf("status does not say %q:\n%s", want, out.String())
	}
}

// TestStatusOfAQueuedEventIsPending: an event the planner has not planned
// yet (a switch just requested) is pending; an id kvlive never heard of is
// ErrNoRollout; a prefix of a recorded id stands for it.
func TestStatusOfAQueuedEventIsPending(t *testing.T) {
	f := newFixture(t)
	queued := f.switched(events.SwitchRequest{ID: "queued", From: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"},
		To: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, RequestedAt: t0})
	f.rollout(events.Rollout{EventID: editID, Planned: 3, PlannedAt: t0})
	r := f.reader()
	if a, err := r.Status(t.Context(), queued); err != nil || a.Phase != rollout.PhasePending || a.EventID != queued {
		t.Errorf("status of a queued switch: %+v, %v; want pending", a, err)
	}
	if _, err := r.Status(t.Context(), "switch/typo"); !errors.Is(err, rollout.ErrNoRollout) {
		t.Errorf("status of an unknown event: %v, want ErrNoRollout", err)
	}
	if a, err := r.Status(t.Context(), editID[:12]); err != nil || a.EventID != editID || a.Planned != 3 {
		t.Errorf("status by a prefix: %+v, %v; want %s's account", a, err, editID)
	}
}

// TestStatusCountsVerdicts: rollout status counts KubeVirt's verdicts on
// the VMs the rollout moved, the VMs still awaited and the mismatches; a
// rollout whose VMs all have an outcome is verifying while one is awaited.
func TestStatusCountsVerdicts(t *testing.T) {
	f := newFixture(t)
	f.rollout(events.Rollout{EventID: editID, Planned: 3, PlannedAt: t0})
	seedOutcomes(f)
	seedVerdicts(f)
	a, err := f.reader().Status(t.Context(), editID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Verdicts[events.ObservedLive] != 2 || a.Awaited != 1 || a.Differ != 1 {
		t.Errorf("verdicts %v, awaited %d, differ %d; want 2 live, 1 awaited, 1 differs", a.Verdicts, a.Awaited, a.Differ)
	}
	if a.Phase != rollout.PhaseVerifying {
		t.Errorf("phase %s with a verdict awaited, want verifying", a.Phase)
	}
	var out bytes.Buffer
	if err := WriteStatus(&out, a, printer.FormatTable); err != nil {
		t.Fatal(err)
	}
	if want := "verdicts:     2 live, 1 awaited (KubeVirt's, on the VMs moved; 1 differs from the prediction)"; !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant %q", out.String(), want)
	}
}
