package kvlive

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "kvlive"

var stages = []string{"watcher", "planner", "applier"}

// The test scaffolding: real servers and players, and unit fixtures. Only
// _test.go files import them, and the fixtures start no real server.
const (
	framework = "integration/framework"
	testenv   = "internal/testenv"
	// standin plays virt-controller in the demo and the tests: it knows
	// KubeVirt's rules, not kvlive's, so it can disagree with kvlive.
	standin = "internal/standin"
)

// stageOf names the stage a package belongs to ("planner" for
// planner/offline too), or "".
func stageOf(pkg string) string {
	for _, s := range stages {
		if pkg == s || strings.HasPrefix(pkg, s+"/") {
			return s
		}
	}
	return ""
}

// cliRuntime is kubectl's command-line machinery: its flags, printers and
// resource builder, and kustomize with them. kvlive's flags are the CLI's,
// bound in cmd/ with client-go's clientcmd.
const cliRuntime = "k8s.io/cli-runtime"

// isReadModel reports whether pkg is one of the read models (readmodel/):
// the views of the record the CLI, the dashboard and the notifier share.
func isReadModel(pkg string) bool { return pkg == "readmodel" || strings.HasPrefix(pkg, "readmodel/") }

// layerViolation says why importing imp from pkg breaks the layering, or "".
func layerViolation(pkg, imp string) string {
	if imp == cliRuntime || strings.HasPrefix(imp, cliRuntime+"/") {
		if !strings.HasPrefix(pkg, "cmd/") {
			return "kubectl's command-line machinery is the CLI's: only cmd/ binds flags"
		}
		return ""
	}
	if !strings.HasPrefix(imp, module+"/") {
		return ""
	}
	imp = strings.TrimPrefix(imp, module+"/")
	from, to := stageOf(pkg), stageOf(imp)
	switch {
	case pkg == standin:
		return "the stand-in plays KubeVirt and imports nothing of kvlive's"
	case pkg == testenv && imp == framework:
		return "unit fixtures start no real server"
	case (imp == framework || imp == testenv) && pkg != framework && pkg != testenv:
		return "test scaffolding is imported only by _test.go files"
	case pkg == "events":
		return "the wire imports no other kvlive package"
	case pkg == "instancetype" && imp != "events":
		return "the domain package imports only events"
	case from != "" && to != "" && from != to:
		return "a stage imports another stage; stages meet only on the wire"
	case strings.HasPrefix(pkg, "internal/") && to != "":
		return "internal/ never imports a stage"
	case strings.HasPrefix(pkg, "internal/") && (imp == "rollout" || isReadModel(imp)):
		return "internal/ is infrastructure: it imports no rollout control and no read model"
	case isReadModel(pkg) && to != "":
		return "the read models read the record; they import no stage"
	case pkg == "rollout" && to != "":
		return "rollout control imports no stage; the stages import it"
	case pkg == "rollout" && isReadModel(imp):
		return "rollout control imports no read model; the read models read it"
	case !strings.HasPrefix(pkg, "cmd/") && strings.HasPrefix(imp, "cmd/"):
		return "only cmd/ wires"
	}
	return ""
}

// TestLayering fails when a package's non-test code imports across the
// layers ARCHITECTURE.md draws.
func TestLayering(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "tools" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			if why := layerViolation(pkg, imp); why != "" {
				t.Errorf("%s imports %s: %s", path, imp, why)
			}
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files; is the walk rooted at the module?", checked)
	}
}

func TestLayerViolation(t *testing.T) {
	tests := []struct {
		pkg, imp string
		bad      bool
	}{
		{"applier", "kvlive/planner", true},
		{"applier", "kvlive/planner/offline", true},
		{"planner/offline", "kvlive/planner", false},
		{"readmodel/replay", "kvlive/planner/offline", true},
		{"planner/offline", "kvlive/readmodel/replay", false},
		{"internal/bus", "kvlive/rollout", true},
		{"internal/printer", "kvlive/readmodel/inspect", true},
		{"rollout", "kvlive/readmodel/inspect", true},
		{"internal/kube", "kvlive/instancetype", false},
		{"rollout", "kvlive/applier", true},
		{"applier", "kvlive/rollout", false},
		{"readmodel/inspect", "kvlive/rollout", false},
		{"instancetype", "kvlive/internal/kube", true},
		{"events", "kvlive/instancetype", true},
		{"watcher", "kvlive/cmd/kvlive/pipeline", true},
		{"cmd/kvlive/pipeline", "kvlive/applier", false},
		{"applier", "k8s.io/client-go/kubernetes", false},
		{"internal/kube", "kvlive/internal/testenv", true},
		{"cmd/kvlive/pipeline", "kvlive/integration/framework", true},
		{"integration", "kvlive/integration/framework", true},
		{"events", "kvlive/internal/testenv", true},
		{"integration/framework", "kvlive/internal/testenv", false},
		{"integration/framework", "kvlive/internal/kube", false},
		{"internal/testenv", "kvlive/integration/framework", true},
		{"internal/testenv", "kvlive/internal/bus", false},
		{"internal/kube", "k8s.io/cli-runtime/pkg/genericclioptions", true},
		{"watcher", "k8s.io/cli-runtime/pkg/printers", true},
		{"cmd/kvlive", "k8s.io/cli-runtime/pkg/genericclioptions", false},
		{"internal/kube", "k8s.io/client-go/tools/clientcmd", false},
		{"internal/standin", "kvlive/internal/kube", true},
		{"internal/standin", "kvlive/instancetype", true},
		{"internal/standin", "k8s.io/client-go/tools/cache", false},
		{"cmd/kvlive/pipeline", "kvlive/internal/standin", false},
	}
	for _, tt := range tests {
		if got := layerViolation(tt.pkg, tt.imp) != ""; got != tt.bad {
			t.Errorf("%s → %s: violation %v, want %v", tt.pkg, tt.imp, got, tt.bad)
		}
	}
}

// TestStagesLinkNoFakes: the stages and rollout control talk to a real API
// server only, and offline planning reads a file into the cache's indexers;
// no fake clientset (nor kvlive's in-memory cluster) is linked into them.
func TestStagesLinkNoFakes(t *testing.T) {
	args := []string{"list", "-deps", "./rollout", "./planner/offline"}
	for _, s := range stages {
		args = append(args, "./"+s)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps named %d packages; want the stages' whole graph", len(deps))
	}
	for _, dep := range deps {
		if strings.HasSuffix(dep, "/fake") || strings.Contains(dep, "/fake/") || dep == module+"/internal/kube/inmemory" {
			t.Errorf("a stage links %s", dep)
		}
	}
}

// TestNoDependencyGlobalWritten: no package's non-test code assigns to a
// variable of a package it imports (apimachinery's watch.DefaultChanSize,
// say): such a write changes the dependency for every other user in the
// process, and tests that link it see a different library.
func TestNoDependencyGlobalWritten(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "tools" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, w := range dependencyWrites(f) {
			t.Errorf("%s: assigns %s, a variable of an imported package", fset.Position(w.Pos()), w.name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// write is an assignment to an imported package's variable.
type write struct {
	ast.Node
	name string
}

// dependencyWrites finds, in f, the assignments (=, op=, ++, --) whose
// target is pkg.Name with pkg an import of f's (an identifier the parser
// did not resolve to a declaration in the file).
func dependencyWrites(f *ast.File) []write {
	imported := map[string]bool{}
	for _, spec := range f.Imports {
		p, _ := strconv.Unquote(spec.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if spec.Name != nil {
			name = spec.Name.Name
		}
		imported[name] = true
	}
	var found []write
	check := func(n ast.Node, target ast.Expr) {
		// Down to the root of pkg.Var.Field[i]: the write lands in pkg.
		var sel *ast.SelectorExpr
		for e := target; ; {
			switch x := e.(type) {
			case *ast.SelectorExpr:
				sel, e = x, x.X
				continue
			case *ast.IndexExpr:
				e = x.X
				continue
			case *ast.StarExpr:
				e = x.X
				continue
			case *ast.ParenExpr:
				e = x.X
				continue
			case *ast.Ident:
				if sel != nil && sel.X == x && x.Obj == nil && imported[x.Name] { //nolint:staticcheck // Obj is how the parser says an identifier is no local declaration
					found = append(found, write{n, x.Name + "." + sel.Sel.Name})
				}
			}
			return
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			for _, lhs := range s.Lhs {
				check(s, lhs)
			}
		case *ast.IncDecStmt:
			check(s, s.X)
		}
		return true
	})
	return found
}

func TestDependencyWrites(t *testing.T) {
	src := `package p

import (
	"k8s.io/apimachinery/pkg/watch"
	klog "k8s.io/klog/v2"
	"net/http"
)

func f(s struct{ N int }) {
	watch.DefaultChanSize = 1 << 20
	klog.X++
	http.DefaultClient.Timeout = 0
	var local struct{ DefaultChanSize int32 }
	local.DefaultChanSize = 1
	s.N = 2
	_ = watch.DefaultChanSize
}
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range dependencyWrites(f) {
		got = append(got, w.name)
	}
	if want := []string{"watch.DefaultChanSize", "klog.X", "http.DefaultClient"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("found %v, want %v", got, want)
	}
}
