package offline

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"kvlive/events"
)

// TestPrintBrief: a plan longer than the screen is the count by result,
// each change with the VMs it reaches per class, the first rows and how to
// see the rest; a short one is the whole table.
func TestPrintBrief(t *testing.T) {
	var plans []events.Plan
	for i := range 50 {
		p := events.Plan{VM: events.VMRef{Namespace: "ns", Name: fmt.Sprintf("vm-%02d", i)}, Action: events.ResultLive,
			Changes: []events.Change{{Field: "cpu.sockets", From: "2", To: "4", Class: "live"}}}
		if i%5 == 0 {
			p.Action = events.ResultRestart
			p.Changes = append(p.Changes, events.Change{Field: "memory.guest", From: "4Gi", To: "8Gi", Class: "restart"})
		}
		plans = append(plans, p)
	}
	var buf bytes.Buffer
	if err := NewReport(plans).PrintBrief(&buf, 0, 5); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"50 VMs: 40 live, 10 restart", "cpu.sockets 2→4: 50 VMs (50 live)", "memory.guest 4Gi→8Gi: 10 VMs (10 restart)", "vm-04", "… and 45 more VMs: -o wide"} {
		if !strings.Contains(out, want) {
			t.Errorf("brief plan lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "vm-05") {
		t.Errorf("brief plan lists a sixth VM:\n%s", out)
	}
	buf.Reset()
	if err := NewReport(plans[:3]).PrintBrief(&buf, 0, 5); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "vm-02") || strings.Contains(out, "more VMs") {
		t.Errorf("a short plan is not the whole table:\n%s", out)
	}
}
