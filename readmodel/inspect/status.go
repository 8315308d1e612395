package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

// Status is the account of event arg's rollout; a unique prefix of a
// recorded event id stands for the id. An event in the events stream that
// the planner has not planned yet (a switch just requested) is pending,
// not unknown; one the planner dead-lettered is refused, with its reason
// (Account.Refused), never pending.
func (r *Reader) Status(ctx context.Context, arg string) (rollout.Account, error) {
	id, err := rollout.ResolveEventID(ctx, r.js, arg)
	if err != nil {
		return rollout.Account{}, err
	}
	a, err := rollout.AccountOf(ctx, r.js, id)
	if err == nil {
		err = rollout.CountVerdicts(ctx, r.js, &a)
	}
	if err == nil {
		err = rollout.CountMigrations(ctx, r.js, &a, time.Now())
	}
	if err == nil && !a.Recorded {
		err = r.refused(ctx, &a)
	}
	if !errors.Is(err, rollout.ErrNoRollout) {
		return a, err
	}
	if queued, qerr := r.HasEvent(ctx, id); qerr != nil || !queued {
		return a, errors.Join(err, qerr)
	}
	a.EventID, a.Phase = id, rollout.PhasePending
	return a, r.refused(ctx, &a)
}

// refused marks an event the planner never planned as refused when it
// dead-lettered it, with the reason.
func (r *Reader) refused(ctx context.Context, a *rollout.Account) error {
	dead, err := r.deadEvents(ctx)
	if reason, ok := dead[a.EventID]; ok {
		a.Phase, a.Refused = rollout.PhaseRefused, reason
	}
	return err
}

// WriteStatus prints a rollout's accounting as a few lines (table or wide)
// or as data (json, yaml).
func WriteStatus(w io.Writer, a rollout.Account, f printer.Format) error {
	if !f.Human() {
		return printer.WriteData(w, f, a)
	}
	phase := string(a.Phase)
	switch {
	case a.Phase == rollout.PhaseIncomplete:
		phase += fmt.Sprintf(": %d VMs unaccounted for", a.Unaccounted)
		if !a.Since.IsZero() {
			phase += " since " + a.Since.Format(time.RFC3339)
		}
		if len(a.Dropped) > 0 {
			phase += "; " + strings.Join(a.Dropped, " and ") + " dropped records stored after the rollout was planned, " +
				"to its limits: their VMs may be among them (raise kvlive run's --max-bytes)"
		}
	case a.Phase == rollout.PhaseRefused:
		phase += " (dead-lettered by the planner: " + a.Refused + "; kvlive dlq list shows it)"
	case a.Control.State != events.StateRunning && (a.Control.By != "" || a.Control.Reason != ""):
		phase += fmt.Sprintf(" (%s)", a.Control.Describe())
		if !a.Control.At.IsZero() {
			phase += " since " + a.Control.At.Format(time.RFC3339)
		}
	}
	if a.ControlError != "" {
		phase += " [control record: " + a.ControlError + "]"
	}
	total := 0
	for _, n := range a.Outcomes {
		total += n
	}
	planned := "not planned yet"
	switch {
	case a.Recorded:
		planned = fmt.Sprintf("%d VMs", a.Planned)
	case a.Phase == rollout.PhaseRefused:
		planned = "never"
	}
	_, err := fmt.Fprintf(w, "event:        %s\nstate:        %s\nplanned:      %s\noutcomes:     %s\ndead letters: %d\nheld:         %d\nin flight:    %d\n",
		a.EventID, phase, planned, withCounts(total, a.Outcomes), a.DeadLetters, a.Held, a.InFlight)
	if err == nil && a.Verdicts != nil {
		_, err = fmt.Fprintf(w, "verdicts:     %s (KubeVirt's, on the VMs moved; %d %s from the prediction)\n",
			VerdictList(verdictCounts(a)), a.Differ, map[bool]string{true: "differs", false: "differ"}[a.Differ == 1])
	}
	if m := a.Migrations; err == nil && m != nil && (m.Unfinished > 0 || m.Waiting != "" || m.ToMove > 0) {
		line := fmt.Sprintf("%d running, %d queued in KubeVirt (moved, their migration not started), %d live moves to come (%d of the migration budget's slots in use%s)",
			m.Running, m.Queued, m.ToMove, m.InUse, SlotHolders(m.Holders))
		if len(m.Failed) > 0 {
			line += "; failed: " + strings.Join(m.Failed, ", ")
		}
		if m.Waiting != "" {
			line += "; live moves wait: " + m.Waiting
		}
		if m.Left > 0 {
			line += fmt.Sprintf("; about %v left at the pace so far (%s)", m.Left, m.Pace)
		}
		_, err = fmt.Fprintf(w, "migrations:   %s\n", line)
	}
	if err == nil && len(a.Record.Supersedes) > 0 {
		_, err = fmt.Fprintf(w, "supersedes:   %s\n", strings.Join(a.Record.Supersedes, ", "))
	}
	for _, r := range a.Control.Retries {
		if err == nil {
			_, err = fmt.Fprintf(w, "retried:      %d failed VMs as %s (by %s at %s)\n", len(r.VMs), r.EventID, r.By, r.At.Format(time.RFC3339))
		}
	}
	if err == nil && !a.Control.Settled.IsZero() {
		_, err = fmt.Fprintf(w, "settled:      %s; a plan of it moves no VM now (kvlive dlq retry reopens it)\n", a.Control.Settled.Format(time.RFC3339))
	}
	if err != nil || len(a.Batches) == 0 {
		return err
	}
	_, err = fmt.Fprintf(w, "batches:      %d of %d released %v, %d VMs staged\n", a.Batch+1, len(a.Batches), a.Batches, a.Staged)
	if err == nil && a.Control.Gate != "" {
		gate := a.Control.Gate
		if !a.Control.GateAt.IsZero() {
			gate = fmt.Sprintf("batch %d passed at %s: %s", a.Batch+1, a.Control.GateAt.Format(time.RFC3339), gate)
		}
		_, err = fmt.Fprintf(w, "gate:         %s\n", gate)
	}
	if err == nil && a.Record.PolicyError != "" {
		_, err = fmt.Fprintf(w, "policy:       refused: %s\n", a.Record.PolicyError)
	}
	return err
}

// progressWidth is the width of ProgressLine's bar.
const progressWidth = 20

// ProgressLine renders a rollout's progress on one line:
// "[#######·············] 35/100 settled · running · 30 live, 5 restart".
func ProgressLine(a rollout.Account) string {
	switch {
	case a.Phase == rollout.PhaseRefused:
		return string(a.Phase) + " · never planned: " + a.Refused
	case !a.Recorded:
		return string(a.Phase) + " · not planned yet"
	}
	done := 0
	if a.Planned > 0 {
		done = a.Settled() * progressWidth / a.Planned
	}
	bar := strings.Repeat("#", done) + strings.Repeat("·", progressWidth-done)
	line := fmt.Sprintf("[%s] %d/%d settled · %s", bar, a.Settled(), a.Planned, a.Phase)
	if len(a.Batches) > 0 {
		line += fmt.Sprintf(" · batch %d/%d", a.Batch+1, len(a.Batches))
		if a.Control.GateAt.IsZero() && a.Control.Gate != "" {
			line += " (gate " + a.Control.Gate + ")"
		}
	}
	if list := countList(a.Outcomes, false); list != "" {
		line += " · " + list
	}
	if a.DeadLetters > 0 {
		line += fmt.Sprintf(" · %d dead letters", a.DeadLetters)
	}
	if a.Held > 0 {
		line += fmt.Sprintf(" · %d held", a.Held)
	}
	return line
}

// verdictCounts are a's verdict counts by name, the awaited VMs included.
func verdictCounts(a rollout.Account) map[string]int {
	counts := map[string]int{"awaited": a.Awaited}
	for v, n := range a.Verdicts {
		counts[string(v)] = n
	}
	return counts
}

// SlotHolders names the VMs holding the migration budget's slots, the
// first ten of them, after a colon ("" when none holds one).
func SlotHolders(vms []string) string {
	const shown = 10
	switch {
	case len(vms) == 0:
		return ""
	case len(vms) > shown:
		return fmt.Sprintf(": %s and %d more", strings.Join(vms[:shown], ", "), len(vms)-shown)
	}
	return ": " + strings.Join(vms, ", ")
}
