// Command testareas runs kvlive's integration tests by area, side by side,
// and says where the time went.
//
// An area is a set of test files of one package, with a budget (see
// integration/AREAS). Each package's test binary is built once (go test -c);
// each area runs as a process of it, with -test.run naming the area's tests
// and a -test.timeout of twice its budget, at most -jobs areas at once,
// longest budget first, and beside them the areas marked idle, which
// mostly wait on the wall clock (a NATS outage, a restart window) and
// leave their core to the others. The tests of one area run one after another, as
// they always have; areas share nothing but the machine, since every test
// starts its own servers on free ports.
//
// It fails when a test fails, when an area takes longer than its budget
// (naming it), and when a test of a package belongs to no area or to two.
// Each area's go test -json events are kept in -out; the summary gives every
// area's time against its budget, the CPU it and the servers it started
// used (so an area marked idle that no longer waits shows), and the
// slowest tests. With -report it
// only reads a file of go test -json events (hack/test.sh's unit tests) and
// says the same of them.
//
//	go run ./hack/testareas -areas integration/AREAS -tags integration -jobs 2
//	go test -json ./... >unit.json; go run ./hack/testareas -report unit.json
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testareas:", err)
		os.Exit(1)
	}
}

type options struct {
	areasFile string
	tags      string
	jobs      int
	out       string
	only      string
	slowest   int
	report    string
}

func run() error {
	var o options
	flag.StringVar(&o.areasFile, "areas", "integration/AREAS", "the file that names the areas")
	flag.StringVar(&o.tags, "tags", "integration", "build tags of the test binaries")
	flag.IntVar(&o.jobs, "jobs", 2, "areas run at once")
	flag.StringVar(&o.out, "out", "", "folder for each area's go test -json events (default: a new temporary folder)")
	flag.StringVar(&o.only, "only", "", "comma-separated areas to run (default: all)")
	flag.IntVar(&o.slowest, "slowest", 15, "how many of the slowest tests the summary lists")
	flag.StringVar(&o.report, "report", "", "only report on a file of go test -json events (\"-\": stdin): what failed, the slowest packages and tests")
	flag.Parse()
	if o.report != "" {
		return reportFile(os.Stdout, o.report, o.slowest)
	}
	if o.jobs < 1 {
		return errors.New("-jobs must be at least 1")
	}

	areas, err := readAreas(o.areasFile)
	if err != nil {
		return err
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "kvlive-areas-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	ctx := context.Background()
	bins, err := buildPackages(ctx, o, areas)
	if err != nil {
		return err
	}
	if err := assignTests(ctx, areas, bins); err != nil {
		return err
	}
	if o.only != "" {
		if areas, err = selectAreas(areas, strings.Split(o.only, ",")); err != nil {
			return err
		}
	}
	if err := prepare(ctx, o, areas, bins); err != nil {
		return err
	}

	start := time.Now()
	results := runAreas(ctx, o, areas, bins)
	return summarize(os.Stdout, o, results, time.Since(start))
}

// An area is one line of the areas file.
type area struct {
	name   string
	budget time.Duration
	// idle areas mostly wait: they run beside the -jobs others, not in
	// their count.
	idle bool
	// pkg is the package's folder, relative to the working directory.
	pkg string
	// files are the test files whose tests the area runs; nil means all of
	// the package's.
	files []string
	// tests are the area's top-level tests, once assigned.
	tests []string
}

// readAreas parses the areas file: "name budget [idle] package file..." a
// line, '#' comments, the package relative to the file's folder, "*" for
// every test file of the package.
func readAreas(path string) ([]*area, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var areas []*area
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		idle := len(fields) > 2 && fields[2] == "idle"
		if idle {
			fields = slices.Delete(fields, 2, 3)
		}
		if len(fields) < 4 {
			return nil, fmt.Errorf("%s:%d: want \"area budget [idle] package file...\"", path, line)
		}
		budget, err := time.ParseDuration(fields[1])
		if err != nil || budget <= 0 {
			return nil, fmt.Errorf("%s:%d: budget %q is not a duration", path, line, fields[1])
		}
		if seen[fields[0]] {
			return nil, fmt.Errorf("%s:%d: area %s named twice", path, line, fields[0])
		}
		seen[fields[0]] = true
		a := &area{name: fields[0], budget: budget, idle: idle, pkg: filepath.Join(filepath.Dir(path), fields[2])}
		if len(fields) != 4 || fields[3] != "*" {
			a.files = fields[3:]
		}
		areas = append(areas, a)
	}
	return areas, sc.Err()
}

// buildPackages builds each package's test binary once, into o.out.
func buildPackages(ctx context.Context, o options, areas []*area) (map[string]string, error) {
	bins := map[string]string{}
	for _, a := range areas {
		if _, ok := bins[a.pkg]; ok {
			continue
		}
		bin, err := filepath.Abs(filepath.Join(o.out, strings.ReplaceAll(filepath.Clean(a.pkg), string(filepath.Separator), "_")+".test"))
		if err != nil {
			return nil, err
		}
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-tags", o.tags, "-o", bin, "./"+filepath.Clean(a.pkg))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("build the tests of %s: %w", a.pkg, err)
		}
		fmt.Printf("testareas: built %s's tests in %s\n", a.pkg, time.Since(start).Round(time.Second))
		bins[a.pkg] = bin
	}
	return bins, nil
}

// assignTests gives each area its tests, and fails when a test the
// package's binary lists is in no area or in two.
func assignTests(ctx context.Context, areas []*area, bins map[string]string) error {
	var problems []string
	for pkg, bin := range bins {
		listed, err := listTests(ctx, pkg, bin)
		if err != nil {
			return err
		}
		byFile, err := testsByFile(pkg)
		if err != nil {
			return err
		}
		owner := map[string]string{}
		for _, a := range areas {
			if a.pkg != pkg {
				continue
			}
			tests := listed
			if a.files != nil {
				tests = nil
				for _, file := range a.files {
					names, ok := byFile[file]
					if !ok {
						problems = append(problems, fmt.Sprintf("area %s names %s, which has no tests in %s", a.name, file, pkg))
					}
					tests = append(tests, names...)
				}
			}
			for _, t := range tests {
				if other, ok := owner[t]; ok {
					problems = append(problems, fmt.Sprintf("%s is in two areas: %s and %s", t, other, a.name))
				}
				owner[t] = a.name
			}
			a.tests = tests
		}
		for _, t := range listed {
			if _, ok := owner[t]; !ok {
				problems = append(problems, fmt.Sprintf("%s (%s) is in no area: add its file to an area", t, pkg))
			}
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return errors.New(strings.Join(problems, "\n  "))
	}
	return nil
}

// listTests asks a test binary for its top-level tests.
func listTests(ctx context.Context, pkg, bin string) ([]string, error) {
	cmd := exec.CommandContext(ctx, bin, "-test.list", "^Test")
	cmd.Dir = pkg
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("list the tests of %s: %w", pkg, err)
	}
	var tests []string
	for _, line := range strings.Fields(string(out)) {
		if strings.HasPrefix(line, "Test") {
			tests = append(tests, line)
		}
	}
	return tests, nil
}

// testsByFile maps each _test.go file of pkg to the tests it declares.
func testsByFile(pkg string) (map[string][]string, error) {
	files, err := filepath.Glob(filepath.Join(pkg, "*_test.go"))
	if err != nil {
		return nil, err
	}
	byFile := map[string][]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
				byFile[filepath.Base(path)] = append(byFile[filepath.Base(path)], fn.Name.Name)
			}
		}
	}
	return byFile, nil
}

func selectAreas(areas []*area, names []string) ([]*area, error) {
	var picked []*area
	for _, name := range names {
		i := slices.IndexFunc(areas, func(a *area) bool { return a.name == name })
		if i < 0 {
			return nil, fmt.Errorf("no area %q", name)
		}
		picked = append(picked, areas[i])
	}
	return picked, nil
}

// prepare runs each package's TestMain once with no test, so what it builds
// for every test (the kvlive binary, into KVLIVE_BIN_DIR) is built once, not
// by every area at the same moment.
func prepare(ctx context.Context, o options, areas []*area, bins map[string]string) error {
	dir, err := filepath.Abs(filepath.Join(o.out, "bin"))
	if err != nil {
		return err
	}
	if err := os.Setenv("KVLIVE_BIN_DIR", dir); err != nil {
		return err
	}
	done := map[string]bool{}
	for _, a := range areas {
		if done[a.pkg] {
			continue
		}
		done[a.pkg] = true
		cmd := exec.CommandContext(ctx, bins[a.pkg], "-test.run", "^$")
		cmd.Dir = a.pkg
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("prepare %s: %w", a.pkg, err)
		}
	}
	return nil
}
