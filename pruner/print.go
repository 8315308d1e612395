package pruner

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"kvlive/internal/printer"
)

// Print writes candidates as -o asks: a table (AGE from now) for people,
// the list for programs.
func Print(w io.Writer, cands []Candidate, f printer.Format, width int, now time.Time) error {
	if !f.Human() {
		return printer.WriteData(w, f, printer.NonNil(cands))
	}
	t := printer.NewTable(
		printer.Column{Name: "NAMESPACE"},
		printer.Column{Name: "VM"},
		printer.Column{Name: "REVISION", Fit: true, Min: 24},
		printer.Column{Name: "OBJECT", Fit: true},
		printer.Column{Name: "GENERATION"},
		printer.Column{Name: "AGE"},
	)
	for _, c := range cands {
		t.Append(c.Namespace, c.VM, c.Revision, c.Object, strconv.FormatInt(c.Generation, 10), duration.HumanDuration(now.Sub(c.Created)))
	}
	if len(cands) == 0 {
		_, err := fmt.Fprintln(w, "No superseded revision of kvlive's to delete.")
		return err
	}
	return t.Write(w, f, width)
}
