package printer

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func sample() *Table {
	t := NewTable(Column{Name: "NAME"}, Column{Name: "RESULT"}, Column{Name: "TRACE", Wide: true}, Column{Name: "REASON", Fit: true})
	t.Append("vm-1", "live", "4bf92f3577b34da6a3ce929d0e0e4736", "cpu.sockets 2→3 (live), memory.guest 4Gi→6Gi (live)")
	t.Append("a-much-longer-vm-name", "restart", "-", "not migratable")
	return t
}

func write(t *testing.T, tab *Table, f Format, width int) string {
	t.Helper()
	var b bytes.Buffer
	if err := tab.Write(&b, f, width); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTableFitsTheWidth(t *testing.T) {
	out := write(t, sample(), FormatTable, 60)
	for line := range strings.Lines(out) {
		if n := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); n > 60 {
			t.Errorf("line is %d wide, want ≤ 60: %q", n, line)
		}
	}
	if !strings.Contains(out, "…") || strings.Contains(out, "TRACE") {
		t.Errorf("want the reason cut with … and no wide column:\n%s", out)
	}
	if !strings.Contains(out, "a-much-longer-vm-name") {
		t.Errorf("a column that is not Fit is never cut:\n%s", out)
	}
}

func TestTableWithoutWidthIsWhole(t *testing.T) {
	out := write(t, sample(), FormatTable, 0)
	if strings.Contains(out, "…") || !strings.Contains(out, "memory.guest 4Gi→6Gi (live)") {
		t.Errorf("no width, no cut:\n%s", out)
	}
}

func TestWideShowsEveryColumnWhole(t *testing.T) {
	out := write(t, sample(), FormatWide, 40)
	want := "NAME                   RESULT   TRACE                             REASON\n" +
		"vm-1                   live     4bf92f3577b34da6a3ce929d0e0e4736  cpu.sockets 2→3 (live), memory.guest 4Gi→6Gi (live)\n" +
		"a-much-longer-vm-name  restart  -                                 not migratable\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

func TestFitStopsAtItsFloor(t *testing.T) {
	out := write(t, sample(), FormatTable, 10)
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		last := fields[len(fields)-1]
		if utf8.RuneCountInString(last) < 2 {
			t.Errorf("reason cut below its floor: %q", line)
		}
	}
	if !strings.Contains(out, "cpu.sockets…") {
		t.Errorf("want the reason cut to %d characters:\n%s", minFit, out)
	}
}

func TestFormatFlagRefusesUnknown(t *testing.T) {
	var f Format
	v := formatValue{&f, []Format{FormatTable, FormatJSON}}
	if err := v.Set("yaml"); err == nil || err.Error() != "want table or json" {
		t.Errorf("Set(yaml) = %v", err)
	}
	if err := v.Set("json"); err != nil || f != FormatJSON {
		t.Errorf("Set(json) = %v, %q", err, f)
	}
}
