package demo

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"kvlive/events"
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
	e.inspectHints(steps)
	return nil
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
