package inspect

import (
	"bytes"
	"strings"
	"testing"

	"kvlive/internal/printer"
	"kvlive/internal/rollout"
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
