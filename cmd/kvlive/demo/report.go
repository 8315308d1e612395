package demo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"kvlive/events"
	"kvlive/readmodel/inspect"
)

// report prints a per-result summary per step and fails if any VM is off.
func (e *env) report(steps []*stepResult) error {
	if bad := e.table(steps); bad > 0 {
		for _, s := range steps {
			for i, m := range s.mismatches {
				if i == 10 {
					fmt.Fprintf(e.cfg.Out, "  … and %d more\n", len(s.mismatches)-10)
					break
				}
				fmt.Fprintln(e.cfg.Out, "  ✗ "+m)
			}
		}
		return errors.New("demo: some VMs did not reach their expected result")
	}
	untouched := len(e.shapes)
	for _, s := range steps {
		untouched -= s.reached
	}
	fmt.Fprintf(e.cfg.Out, "\nEvery VM reached its expected result: live changes are on the VMIs, restarts are flagged RestartRequired, "+
		"stopped VMs wait for their next boot; %d VMs out of reach were left alone.\n", untouched)
	if e.standin != nil {
		m := e.standin.Migrations()
		fmt.Fprintf(e.cfg.Out, "The in-memory KubeVirt carried the live changes to the guests by %d live migrations, %d at most at once, %v each "+
			"(KubeVirt's limits: 5 in the cluster, 2 from a node).\n", m.Succeeded, m.MaxRunning, standInMigration)
	}
	e.verdicts(steps)
	e.inspectHints(steps)
	return nil
}

// verdicts prints, from kvlive's own record, KubeVirt's verdicts on each
// step's moved VMs next to what kvlive predicted.
func (e *env) verdicts(steps []*stepResult) {
	fmt.Fprintln(e.cfg.Out, "\nKubeVirt's verdicts, as kvlive recorded them:")
	for _, s := range steps {
		a := s.account
		predicted := map[events.Result]int{}
		for _, o := range a.Latest {
			if o.Result.Moves() {
				predicted[o.Result]++
			}
		}
		counts := map[string]int{}
		for v, n := range a.Verdicts {
			counts[string(v)] = n
		}
		fmt.Fprintf(e.cfg.Out, "  %s: predicted %s; observed %s; %d differ\n", s.title, predictedList(predicted),
			inspect.VerdictList(counts), a.Differ)
	}
}

// predictedList renders the moved VMs' predicted results in order.
func predictedList(counts map[events.Result]int) string {
	var parts []string
	for _, r := range events.Results {
		if n := counts[r]; n > 0 {
			parts = append(parts, strconv.Itoa(n)+" "+string(r))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// table prints each step's outcomes by result and whether they are as
// expected, and returns how many VMs are not.
func (e *env) table(steps []*stepResult) (bad int) {
	fmt.Fprintln(e.cfg.Out)
	tw := tabwriter.NewWriter(e.cfg.Out, 0, 4, 2, ' ', tabwriter.AlignRight)
	header := "VMs\t"
	for _, r := range events.Results {
		header += string(r) + "\t"
	}
	fmt.Fprintln(tw, header+"as expected\t  rollout")
	for _, s := range steps {
		counts := s.progress.Counts()
		row := strconv.Itoa(len(s.progress.Outcomes)) + "\t"
		for _, r := range events.Results {
			row += strconv.Itoa(counts[r]) + "\t"
		}
		verdict := "yes"
		if len(s.mismatches) > 0 {
			verdict = fmt.Sprintf("%d off", len(s.mismatches))
			bad += len(s.mismatches)
		}
		fmt.Fprintln(tw, row+verdict+"\t  "+s.title)
	}
	_ = tw.Flush()
	return bad
}

// inspectHints prints the commands that read what the demo did from the
// store it kept.
func (e *env) inspectHints(steps []*stepResult) {
	dir := e.cfg.DataDir
	if dir == "" {
		return
	}
	kvlive := e.cfg.Command
	if kvlive == "" {
		kvlive = "kvlive"
	}
	fmt.Fprintf(e.cfg.Out, "\nInspect the rollouts (the store in %s is kept):\n", dir)
	fmt.Fprintf(e.cfg.Out, "  %s events   --data-dir %s\n", kvlive, dir)
	for _, s := range steps {
		fmt.Fprintf(e.cfg.Out, "  %s trace    --data-dir %s %s\n", kvlive, dir, s.progress.EventID)
	}
	fmt.Fprintf(e.cfg.Out, "  %s outcomes --data-dir %s --event %s\n", kvlive, dir, steps[0].progress.EventID)
}
