package offline

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"kvlive/events"
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

// Print writes the report as a table (for people), json or yaml.
func (r Report) Print(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "yaml":
		b, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table", "":
		return r.printTable(w)
	}
	return fmt.Errorf("unknown output format %q (want table, json or yaml)", format)
}

func (r Report) printTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tRESULT\tCHANGES\tREASON")
	for _, vm := range r.VMs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", vm.Namespace, vm.Name, vm.Action, changeList(vm.Changes), vm.Reason)
	}
	if err := tw.Flush(); err != nil {
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
