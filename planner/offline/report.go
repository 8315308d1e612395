package offline

import (
	"fmt"
	"io"
	"strings"

	"kvlive/events"
	"kvlive/internal/printer"
)

// Report is the offline plan contract (ARCHITECTURE.md): one entry per VM
// and a count per result. Its JSON field names are stable.
type Report struct {
	VMs     []VMReport     `json:"vms"`
	Summary map[string]int `json:"summary"`
}

// VMReport is one VM's predicted result.
type VMReport struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Action    events.Result   `json:"action"`
	Reason    string          `json:"reason"`
	Changes   []events.Change `json:"changes"`
}

// planResults are the results a plan can predict, in summary order.
var planResults = []events.Result{events.ResultLive, events.ResultRestart, events.ResultNextBoot, events.ResultNone, events.ResultSkip}

// NewReport turns plans into the report.
func NewReport(plans []events.Plan) Report {
	r := Report{VMs: make([]VMReport, 0, len(plans)), Summary: map[string]int{}}
	for _, res := range planResults {
		r.Summary[string(res)] = 0
	}
	for _, p := range plans {
		changes := p.Changes
		if changes == nil {
			changes = []events.Change{}
		}
		r.VMs = append(r.VMs, VMReport{Namespace: p.VM.Namespace, Name: p.VM.Name, Action: p.Action, Reason: p.Reason, Changes: changes})
		r.Summary[string(p.Action)]++
	}
	return r
}

// Print writes the report as a table (f table or wide, cut to width when it
// is not zero) or as data (json, yaml).
func (r Report) Print(w io.Writer, f printer.Format, width int) error {
	if !f.Human() {
		return printer.WriteData(w, f, r)
	}
	t := printer.NewTable(
		printer.Column{Name: "NAMESPACE"},
		printer.Column{Name: "NAME"},
		printer.Column{Name: "RESULT"},
		printer.Column{Name: "CHANGES", Fit: true, Min: 16},
		printer.Column{Name: "REASON", Fit: true},
	)
	for _, vm := range r.VMs {
		t.Append(vm.Namespace, vm.Name, string(vm.Action), changeList(vm.Changes), vm.Reason)
	}
	if err := t.Write(w, f, width); err != nil {
		return err
	}
	return r.printSummary(w)
}

// printSummary writes the one-line count a human reads first.
func (r Report) printSummary(w io.Writer) error {
	parts := make([]string, 0, len(planResults))
	for _, res := range planResults {
		parts = append(parts, fmt.Sprintf("%d %s", r.Summary[string(res)], res))
	}
	_, err := fmt.Fprintf(w, "\n%d VMs: %s\n", len(r.VMs), strings.Join(parts, ", "))
	return err
}

// changeList renders changes as `field from→to (class)`, or "-".
func changeList(changes []events.Change) string {
	if len(changes) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(changes))
	for _, c := range changes {
		parts = append(parts, fmt.Sprintf("%s %s→%s (%s)", c.Field, c.From, c.To, c.Class))
	}
	return strings.Join(parts, ", ")
}
