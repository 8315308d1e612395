package offline

import (
	"fmt"
	"io"
	"sort"
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
var planResults = []events.Result{events.ResultLive, events.ResultRestart, events.ResultEvict, events.ResultNextBoot, events.ResultNone, events.ResultSkip}

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
	if err := vmTable(r.VMs).Write(w, f, width); err != nil {
		return err
	}
	return r.printSummary(w)
}

// PrintBrief writes the report for a person at a terminal: the whole table
// when it has at most rows VMs; otherwise the count by result, each change
// with how many VMs it reaches per class, the first rows VMs, and how to see
// the rest (a table of 10,000 VMs before a prompt helps no one).
func (r Report) PrintBrief(w io.Writer, width, rows int) error {
	if len(r.VMs) <= rows {
		return r.Print(w, printer.FormatTable, width)
	}
	if err := r.printSummary(w); err != nil {
		return err
	}
	if err := r.printChanges(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := vmTable(r.VMs[:rows]).Write(w, printer.FormatTable, width); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "… and %d more VMs: -o wide shows every VM (or redirect the output to a file)\n", len(r.VMs)-rows)
	return err
}

// printChanges writes each field change (from → to) with the VMs it
// reaches, by class, most VMs first.
func (r Report) printChanges(w io.Writer) error {
	type change struct{ field, from, to string }
	counts := map[change]map[string]int{}
	total := map[change]int{}
	for _, vm := range r.VMs {
		for _, c := range vm.Changes {
			k := change{c.Field, c.From, c.To}
			if counts[k] == nil {
				counts[k] = map[string]int{}
			}
			counts[k][c.Class]++
			total[k]++
		}
	}
	if len(total) == 0 {
		_, err := fmt.Fprintln(w, "no field changes")
		return err
	}
	keys := make([]change, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if total[keys[i]] != total[keys[j]] {
			return total[keys[i]] > total[keys[j]]
		}
		return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j])
	})
	fmt.Fprintln(w, "changes:")
	for _, k := range keys {
		classes := make([]string, 0, len(counts[k]))
		for class, n := range counts[k] {
			classes = append(classes, fmt.Sprintf("%d %s", n, class))
		}
		sort.Strings(classes)
		if _, err := fmt.Fprintf(w, "  %s %s→%s: %d VMs (%s)\n", k.field, k.from, k.to, total[k], strings.Join(classes, ", ")); err != nil {
			return err
		}
	}
	return nil
}

// vmTable is the per-VM table of a report.
func vmTable(vms []VMReport) *printer.Table {
	t := printer.NewTable(
		printer.Column{Name: "NAMESPACE"},
		printer.Column{Name: "NAME"},
		printer.Column{Name: "RESULT"},
		printer.Column{Name: "CHANGES", Fit: true, Min: 16},
		printer.Column{Name: "REASON", Fit: true},
	)
	for _, vm := range vms {
		t.Append(vm.Namespace, vm.Name, string(vm.Action), changeList(vm.Changes), vm.Reason)
	}
	return t
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
