package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// docFiles are the documents whose kvlive command lines must match the
// command tree.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md", "../../hack/README.md"}
	more, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if top, _ := filepath.Glob("../../*.md"); len(top) > 0 {
		more = append(more, top...)
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range append(files, more...) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// inlineCode is a Markdown code span.
var inlineCode = regexp.MustCompile("`([^`]+)`")

// commandLines finds the kvlive command lines of a Markdown document: the
// lines of its code blocks and its code spans that run kvlive (kvlive,
// ./kvlive, bin/kvlive, kubectl kvlive), with where each is.
func commandLines(doc string) map[string]string {
	lines := map[string]string{}
	inBlock := false
	for i, line := range strings.Split(doc, "\n") {
		where := fmt.Sprintf("line %d", i+1)
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			if args := kvliveArgs(line); args != nil {
				lines[where+": "+strings.TrimSpace(line)] = strings.Join(args, "\x00")
			}
			continue
		}
		for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
			if args := kvliveArgs(m[1]); args != nil {
				lines[where+": `"+m[1]+"`"] = strings.Join(args, "\x00")
			}
		}
	}
	return lines
}

// kvliveArgs splits a shell line that runs kvlive into kvlive's arguments
// (up to a comment, a pipe or the next command), or nil.
func kvliveArgs(line string) []string {
	words := shellWords(line)
	for i, w := range words {
		switch w {
		case "kvlive", "./kvlive", "bin/kvlive", "./bin/kvlive", "kubectl-kvlive":
		default:
			continue
		}
		if i > 0 && !separator(words[i-1]) && words[i-1] != "kubectl" {
			return nil // "kvlive" as a word of prose or another command's argument
		}
		var args []string
		for _, a := range words[i+1:] {
			if separator(a) || strings.HasPrefix(a, "#") {
				break
			}
			args = append(args, a)
		}
		return args
	}
	return nil
}

// separator reports a shell word that ends one command.
func separator(w string) bool {
	switch w {
	case "&&", "||", "|", ";", "&", "(", ")", "$":
		return true
	}
	return false
}

// shellWords splits a line the way a shell would, roughly: on spaces,
// keeping quoted strings whole (without their quotes).
func shellWords(line string) []string {
	var words []string
	var b strings.Builder
	quote, inWord := rune(0), false
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			b.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		default:
			b.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, b.String())
	}
	return words
}

// checkArgs says what in args the command tree under root does not have:
// a subcommand, or a flag of the command it reaches.
func checkArgs(root *cobra.Command, args []string) []string {
	cmd := root
	var problems []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && a != "-" && a != "--" {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			var found bool
			if strings.HasPrefix(a, "--") {
				found = cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil
			} else {
				found = len(name) >= 1 && (cmd.Flags().ShorthandLookup(name[:1]) != nil || cmd.InheritedFlags().ShorthandLookup(name[:1]) != nil)
			}
			if !found {
				problems = append(problems, fmt.Sprintf("%q has no flag %s", cmd.CommandPath(), a))
			}
			continue
		}
		if !cmd.HasSubCommands() {
			continue // a positional argument
		}
		var next *cobra.Command
		var missing []string
		for alt := range strings.SplitSeq(a, "|") { // "trace|outcomes|events"
			if c := subcommand(cmd, alt); c != nil {
				next = c
			} else {
				missing = append(missing, alt)
			}
		}
		switch {
		case next == nil && cmd.Runnable() && cmd.ValidateArgs([]string{a}) == nil:
			continue // a positional argument of a command that also has subcommands
		case len(missing) > 0:
			for _, m := range missing {
				problems = append(problems, fmt.Sprintf("%q has no command %q", cmd.CommandPath(), m))
			}
		}
		if next == nil {
			return problems
		}
		cmd = next
	}
	return problems
}

// subcommand is cmd's subcommand called (or aliased) name, or nil.
func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// treeRoot is kvlive's command tree with the commands cobra adds when it
// runs (completion, help).
func treeRoot() *cobra.Command {
	root := newRoot()
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	return root
}

// TestDocsNameCommandsAndFlagsThatExist: every kvlive command line in the
// README and docs/ names commands and flags kvlive has.
func TestDocsNameCommandsAndFlagsThatExist(t *testing.T) {
	root := treeRoot()
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for where, joined := range commandLines(string(b)) {
			checked++
			for _, p := range checkArgs(root, strings.Split(joined, "\x00")) {
				t.Errorf("%s %s: %s", filepath.Base(file), where, p)
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked %d command lines; the docs have more", checked)
	}
}

func TestCheckArgs(t *testing.T) {
	root := treeRoot()
	for _, tt := range []struct {
		line string
		bad  int
	}{
		{"kvlive rollout status switch/0b5c --watch --timeout 30m", 0},
		{"./kvlive run --context prod -n team-a", 0},
		{"kubectl kvlive plan clusterinstancetype/u1.large -A -o json", 0},
		{"kvlive rolouts", 1},
		{"kvlive rollout promot <id>", 1},
		{"kvlive dlq frobnicate 3", 1},
		{"kvlive switch --from a --to b --no-such-flag", 1},
		{"bin/kvlive trace|outcomes|events", 0},
		{"kvlive outcomes -Z", 1},
	} {
		args := kvliveArgs(tt.line)
		if args == nil {
			t.Errorf("%q: not read as a kvlive command line", tt.line)
			continue
		}
		if got := checkArgs(root, args); len(got) != tt.bad {
			t.Errorf("%q: problems %q, want %d", tt.line, got, tt.bad)
		}
	}
}
