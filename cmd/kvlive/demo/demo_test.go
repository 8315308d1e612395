package demo

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemoFleetReachesExpectedResults(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), Config{
		Fleet:   Options{VMs: 60, Namespaces: 3, RunningPercent: 75, NotMigratableEvery: 8},
		Workers: 4, Out: &out,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"edit clusterinstancetype/u1.medium", "switch clusterinstancetype/u1.small", "Every VM reached its expected result"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDemoRejectsAnEmptyFleet(t *testing.T) {
	if err := Run(context.Background(), Config{Fleet: Options{VMs: 0, Namespaces: 1}}); err == nil {
		t.Fatal("demo ran with no VMs")
	}
}

// TestDemoLeavesADirectoryItDoesNotOwnAlone points --data-dir at a
// directory holding someone else's file: the demo refuses it, and the file
// is still there.
func TestDemoLeavesADirectoryItDoesNotOwnAlone(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "thesis.tex")
	if err := os.WriteFile(precious, []byte("years of work"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), Config{DataDir: dir, Fleet: Options{VMs: 6, Namespaces: 1, RunningPercent: 50}, Workers: 2, Out: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "not a kvlive store") {
		t.Fatalf("demo --data-dir on a foreign directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("the demo removed a file it did not create: %v", err)
	}
}

// TestDemoRunsTwiceOnItsOwnStore checks that a rerun empties only its own
// store and succeeds.
func TestDemoRunsTwiceOnItsOwnStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	for range 2 {
		if err := Run(context.Background(), Config{DataDir: dir, Fleet: Options{VMs: 6, Namespaces: 1, RunningPercent: 50}, Workers: 2, Out: io.Discard}); err != nil {
			t.Fatal(err)
		}
	}
}
