package offline

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/internal/printer"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// expected is the shape of the worked examples' .expected.json files.
type expected struct {
	Command string `json:"command"`
	VMs     []struct {
		Namespace, Name string
		Action          events.Result
	} `json:"vms"`
}

func planFile(t *testing.T, file string, req Request) Report {
	t.Helper()
	plans, err := tryPlanFile(t, file, req)
	if err != nil {
		t.Fatal(err)
	}
	return NewReport(plans)
}

func tryPlanFile(t *testing.T, file string, req Request) ([]events.Plan, error) {
	t.Helper()
	in, err := os.Open(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	fleet, err := Load(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	return Plan(fleet, req)
}

// TestWorkedExamples checks the results the design's worked examples
// (shared/examples/plan, copied into testdata) expect.
func TestWorkedExamples(t *testing.T) {
	small := events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.small"}
	tests := []struct {
		file, expected string
		req            Request
	}{
		{"edit-cluster-instancetype.yaml", "edit-cluster-instancetype.expected.json",
			Request{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, Selector: labels.Everything()}},
		{"switch.yaml", "switch.expected.json",
			Request{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.medium"}, From: &small, Selector: labels.Everything()}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tt.expected))
			if err != nil {
				t.Fatal(err)
			}
			var want expected
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			got := map[string]events.Result{}
			for _, vm := range planFile(t, tt.file, tt.req).VMs {
				got[vm.Namespace+"/"+vm.Name] = vm.Action
			}
			if len(got) != len(want.VMs) {
				t.Errorf("%d VMs planned, %s expects %d", len(got), tt.expected, len(want.VMs))
			}
			for _, vm := range want.VMs {
				if a := got[vm.Namespace+"/"+vm.Name]; a != vm.Action {
					t.Errorf("%s/%s: %s, want %s (%s)", vm.Namespace, vm.Name, a, vm.Action, want.Command)
				}
			}
		})
	}
}

func TestGoldenOutput(t *testing.T) {
	report := planFile(t, "edit-cluster-instancetype.yaml",
		Request{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, Selector: labels.Everything()})
	for _, format := range []printer.Format{printer.FormatJSON, printer.FormatTable, printer.FormatYAML} {
		t.Run(string(format), func(t *testing.T) {
			var out bytes.Buffer
			if err := report.Print(&out, format, 0); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "edit-cluster-instancetype."+string(format)+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/whatif -update to create it)", err)
			}
			if out.String() != string(want) {
				t.Errorf("%s output differs from %s:\n%s", format, golden, out.String())
			}
		})
	}
}

func TestNamespaceAndSelectorNarrowThePlan(t *testing.T) {
	req := Request{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}, Namespace: "jobs", Selector: labels.Everything()}
	r := planFile(t, "edit-cluster-instancetype.yaml", req)
	if len(r.VMs) != 1 || r.VMs[0].Name != "batch-7" || r.Summary["next-boot"] != 1 {
		t.Errorf("-n jobs: %+v", r)
	}
	req.Namespace, req.Selector = "", labels.SelectorFromSet(labels.Set{"tier": "none"})
	if r := planFile(t, "edit-cluster-instancetype.yaml", req); len(r.VMs) != 0 {
		t.Errorf("-l tier=none: %+v", r)
	}
}

// TestPlanningSomethingMissingIsAnError: a preview of a typo must not look
// like a plan of nothing (an empty table, exit 0).
func TestPlanningSomethingMissingIsAnError(t *testing.T) {
	small := events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.small"}
	nope := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.nope"}
	for name, req := range map[string]Request{
		"switch to a missing instance type": {Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.huge"}, From: &small, Selector: labels.Everything()},
		"edit of a typo":                    {Object: nope, Selector: labels.Everything()},
		"switch from a typo":                {Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "n1.medium"}, From: &nope, Selector: labels.Everything()},
	} {
		if _, err := tryPlanFile(t, "switch.yaml", req); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%s: %v, want an error saying it does not exist", name, err)
		}
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	tests := map[string]string{
		"unknown kind":   "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n",
		"misspelt field": "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm\nspec:\n  instanceType:\n    name: x\n",
		"not yaml":       "apiVersion: [\n",
		"no kind":        "metadata:\n  name: vm\n",
		"invalid name":   "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: Web_1\n  namespace: shop\n",
		"no vCPUs":       "apiVersion: instancetype.kubevirt.io/v1beta1\nkind: VirtualMachineClusterInstancetype\nmetadata:\n  name: u1\nspec:\n  cpu:\n    guest: 0\n  memory:\n    guest: 1Gi\n",
		"no memory":      "apiVersion: instancetype.kubevirt.io/v1beta1\nkind: VirtualMachineClusterInstancetype\nmetadata:\n  name: u1\nspec:\n  cpu:\n    guest: 1\n  memory:\n    guest: \"-1Gi\"\n",
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(t.Context(), strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), "document 1") {
				t.Errorf("Load = %v, want an error naming document 1", err)
			}
		})
	}
}

// TestLoadRejectsDuplicatesAndEndlessInput: the same object twice names both
// documents (it used to panic in the fake clientset), and an endless input
// is refused at MaxInput instead of filling memory.
func TestLoadRejectsDuplicatesAndEndlessInput(t *testing.T) {
	vm := "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm\n  namespace: shop\n"
	if _, err := Load(t.Context(), strings.NewReader(vm+"---\n"+vm)); err == nil || !strings.Contains(err.Error(), "the same object as document 1") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := Load(t.Context(), zeros{}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("endless input: %v", err)
	}
}

// zeros reads like /dev/zero.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
