// Command rulecheck checks Prometheus rule files as `promtool check rules`
// does, through the same library calls and without building promtool (about
// four minutes cold on 2 cores, against seconds for this): each file is
// parsed and validated by Prometheus's rule-file parser (model/rulefmt:
// strict YAML, every expression through the PromQL parser, every label and
// annotation template, UTF-8 metric and label names), then checked for
// duplicate rules (the same alert or record name with the same labels),
// which promtool reports by default and rulecheck fails on.
//
//	rulecheck FILE...
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rulecheck FILE...")
		os.Exit(2)
	}
	failed := false
	for _, file := range os.Args[1:] {
		n, err := check(file)
		if err != nil {
			fmt.Fprintf(os.Stderr, "rulecheck: %s: FAILED:\n%v\n", file, err)
			failed = true
			continue
		}
		fmt.Printf("rulecheck: %s: SUCCESS: %d rules found\n", file, n)
	}
	if failed {
		os.Exit(1)
	}
}

// check parses and validates one rule file, with promtool's defaults (no
// unknown fields, UTF-8 names, the default PromQL parser options), and
// returns how many rules it holds.
func check(file string) (int, error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, parser.NewParser(parser.Options{}), logger)
	if len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	if dups := duplicates(groups.Groups); len(dups) > 0 {
		return 0, fmt.Errorf("%d duplicate rule(s): %s", len(dups), strings.Join(dups, "; "))
	}
	n := 0
	for _, g := range groups.Groups {
		n += len(g.Rules)
	}
	return n, nil
}

// duplicates names the rules that share their alert or record name and
// their labels (a group's labels overlaid by the rule's) with another, as
// promtool's duplicate-rules lint does.
func duplicates(groups []rulefmt.RuleGroup) []string {
	seen := map[string]int{}
	for _, g := range groups {
		for _, r := range g.Rules {
			merged := maps.Clone(g.Labels)
			if merged == nil {
				merged = map[string]string{}
			}
			maps.Copy(merged, r.Labels)
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			seen[name+labels.FromMap(merged).String()]++
		}
	}
	var dups []string
	for key, n := range seen {
		if n > 1 {
			dups = append(dups, key)
		}
	}
	slices.Sort(dups)
	return dups
}
