package drift

import (
	"fmt"
	"io"
	"strconv"

	"kvlive/internal/printer"
)

// Print writes rows as -o asks: a table of counts per object (table),
// followed by every VM counted (wide), or the rows with their VMs as data
// (json, yaml). An empty result says so in words for people and is an
// empty list for programs.
func Print(w io.Writer, rows []Row, f printer.Format, width int) error {
	if !f.Human() {
		return printer.WriteData(w, f, printer.NonNil(rows))
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "No VMs reference an instance type or preference here.")
		return err
	}
	if err := summary(rows).Write(w, f, width); err != nil {
		return err
	}
	if f != printer.FormatWide {
		return nil
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	return members(rows).Write(w, f, width)
}

func summary(rows []Row) *printer.Table {
	t := printer.NewTable(
		printer.Column{Name: "OBJECT", Fit: true, Min: 24},
		printer.Column{Name: "GENERATION"},
		printer.Column{Name: "VMS"},
		printer.Column{Name: "LATEST"},
		printer.Column{Name: "BEHIND"},
		printer.Column{Name: "MAX-LAG"},
		printer.Column{Name: "UNKNOWN"},
		printer.Column{Name: "UNPINNED"},
		printer.Column{Name: "RESTART-REQUIRED"},
		printer.Column{Name: "HOTPLUG-PENDING"},
		printer.Column{Name: "STOPPED"},
	)
	for _, r := range rows {
		generation := strconv.FormatInt(r.Generation, 10)
		if r.Missing {
			generation = "<missing>"
		}
		t.Append(r.Object.String(), generation, itoa(r.Total), itoa(r.Latest), itoa(r.Behind), strconv.FormatInt(r.MaxLag, 10),
			itoa(r.Unknown), itoa(r.Unpinned), itoa(r.RestartRequired), itoa(r.HotplugPending), itoa(r.Stopped))
	}
	return t
}

func members(rows []Row) *printer.Table {
	t := printer.NewTable(
		printer.Column{Name: "NAMESPACE"},
		printer.Column{Name: "NAME"},
		printer.Column{Name: "OBJECT"},
		printer.Column{Name: "STATE"},
		printer.Column{Name: "PINNED"},
		printer.Column{Name: "LAG"},
		printer.Column{Name: "RESTART-REQUIRED"},
		printer.Column{Name: "HOTPLUG-PENDING"},
		printer.Column{Name: "STOPPED"},
		printer.Column{Name: "REASON"},
	)
	for _, r := range rows {
		for _, v := range r.Members {
			pinned := "-"
			if v.Generation > 0 {
				pinned = strconv.FormatInt(v.Generation, 10)
			}
			t.Append(v.Namespace, v.Name, r.Object.String(), string(v.State), pinned, strconv.FormatInt(v.Lag, 10),
				strconv.FormatBool(v.RestartRequired), strconv.FormatBool(v.HotplugPending), strconv.FormatBool(v.Stopped), v.Reason)
		}
	}
	return t
}

func itoa(n int) string { return strconv.Itoa(n) }
