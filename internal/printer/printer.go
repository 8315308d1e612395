// Package printer writes command output one way for every kvlive command:
// -o table, wide, json or yaml, with tables sized to the terminal.
package printer

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"sigs.k8s.io/yaml"
)

// Format is an output format -o names.
type Format string

// The formats, kubectl's names. FormatTable is for people and sized to the
// terminal; FormatWide shows every column, uncut; JSON and YAML are for programs.
const (
	FormatTable Format = "table"
	FormatWide  Format = "wide"
	FormatJSON  Format = "json"
	FormatYAML  Format = "yaml"
)

// Formats is what list commands take.
var Formats = []Format{FormatTable, FormatWide, FormatJSON, FormatYAML}

// Human reports whether f is for people (table or wide).
func (f Format) Human() bool { return f == FormatTable || f == FormatWide }

// formatValue is -o as a pflag.Value: an unknown format is refused when the
// flags are parsed, naming the ones the command takes.
type formatValue struct {
	f       *Format
	allowed []Format
}

func (v formatValue) String() string { return string(*v.f) }
func (v formatValue) Type() string   { return "format" }

func (v formatValue) Set(s string) error {
	if !slices.Contains(v.allowed, Format(s)) {
		return fmt.Errorf("want %s", list(v.allowed))
	}
	*v.f = Format(s)
	return nil
}

// list renders formats as "table, wide, json or yaml".
func list(formats []Format) string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = string(f)
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// AddFlag binds -o/--output to f, defaulting to allowed[0], and completes
// its values in the shell.
func AddFlag(cmd *cobra.Command, f *Format, allowed ...Format) {
	*f = allowed[0]
	cmd.Flags().VarP(formatValue{f, allowed}, "output", "o", "output format: "+list(allowed))
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		names := make([]cobra.Completion, len(allowed))
		for i, f := range allowed {
			names[i] = string(f)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
}

// WriteData writes v as JSON (indented) or YAML.
func WriteData(w io.Writer, f Format, v any) error {
	switch f {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case FormatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("printer: %q is not a data format", f)
}

// NonNil makes an empty list encode as [], not null.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Width is the width to fit output on w to: the terminal's when w is one,
// else $COLUMNS when set, else 0 (no limit: a pipe gets every character).
func Width(w io.Writer) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil && width > 0 {
			return width
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 0
}

// ScreenRows is how many rows of a long table fit on w's screen besides
// what precedes and follows them (reserved lines): when w is a terminal,
// its height less reserved (at least 5); else 0, no limit: a file or a
// pipe gets every row.
func ScreenRows(w io.Writer, reserved int) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0
	}
	_, height, err := term.GetSize(int(f.Fd()))
	if err != nil || height <= 0 {
		return 0
	}
	return max(height-reserved, 5)
}

// IsTerminal reports whether f, a command's input or output, is a terminal.
func IsTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
