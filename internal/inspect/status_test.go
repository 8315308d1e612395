package inspect

import (
	"bytes"
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
