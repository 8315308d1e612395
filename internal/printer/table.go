package printer

import (
	"bufio"
	"cmp"
	"io"
	"strings"
	"unicode/utf8"
)

// Column is one column of a Table.
type Column struct {
	Name string
	// Wide columns are shown by -o wide only.
	Wide bool
	// Fit columns give up width, widest first, when the table is wider
	// than the terminal; their cells are cut with "…". No column is cut
	// below Min (minFit when zero) or its header.
	Fit bool
	Min int
}

// minFit is the narrowest a Fit column is cut to unless its Min says.
const minFit = 12

// gap separates columns.
const gap = "  "

// Table is rows of cells under Columns, printed like kubectl get prints.
type Table struct {
	Columns []Column
	rows    [][]string
}

// NewTable returns an empty table with columns.
func NewTable(columns ...Column) *Table { return &Table{Columns: columns} }

// Append adds a row; cells are in Columns order, wide ones included.
func (t *Table) Append(cells ...string) { t.rows = append(t.rows, cells) }

// Write prints the table: every column and cell whole for Wide; for Table
// without the wide columns and, when width > 0, cut to fit width.
func (t *Table) Write(w io.Writer, f Format, width int) error {
	var shown []int
	for i, c := range t.Columns {
		if !c.Wide || f == FormatWide {
			shown = append(shown, i)
		}
	}
	widths := make([]int, len(shown))
	for j, i := range shown {
		widths[j] = runes(t.Columns[i].Name)
		for _, row := range t.rows {
			widths[j] = max(widths[j], runes(cell(row, i)))
		}
	}
	if f != FormatWide && width > 0 {
		t.fit(shown, widths, width)
	}
	bw := bufio.NewWriter(w)
	line := func(text func(i int) string) {
		var b strings.Builder
		for j, i := range shown {
			s := Cut(text(i), widths[j])
			b.WriteString(s)
			if j < len(shown)-1 {
				b.WriteString(strings.Repeat(" ", widths[j]-runes(s)) + gap)
			}
		}
		_, _ = bw.WriteString(strings.TrimRight(b.String(), " ") + "\n") // Flush reports the first error
	}
	line(func(i int) string { return t.Columns[i].Name })
	for _, row := range t.rows {
		line(func(i int) string { return cell(row, i) })
	}
	return bw.Flush()
}

// fit narrows the widest Fit column, one character at a time, until the
// table fits width or no Fit column can give more.
func (t *Table) fit(shown, widths []int, width int) {
	total := len(gap) * (len(shown) - 1)
	for _, n := range widths {
		total += n
	}
	for total > width {
		widest := -1
		for j, i := range shown {
			c := t.Columns[i]
			if c.Fit && widths[j] > max(cmp.Or(c.Min, minFit), runes(c.Name)) && (widest < 0 || widths[j] > widths[widest]) {
				widest = j
			}
		}
		if widest < 0 {
			return
		}
		widths[widest]--
		total--
	}
}

func cell(row []string, i int) string {
	if i < len(row) {
		return row[i]
	}
	return ""
}

// Cut shortens s to n characters, the last one "…"; n <= 0 keeps s whole.
func Cut(s string, n int) string {
	if n <= 0 || runes(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func runes(s string) int { return utf8.RuneCountInString(s) }
