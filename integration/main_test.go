//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"kvlive/integration/framework"
)

// kvliveBin is the kvlive binary TestMain builds for every test to run.
var kvliveBin string

// TestMain builds the kvlive binary once, from the working tree, as the
// image does, then runs the tests. With KVLIVE_BIN_DIR set (hack/testareas
// sets it for the areas it runs side by side) the binary is built there
// once and reused by every later run of the tests, which share that folder.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir := os.Getenv("KVLIVE_BIN_DIR")
	if dir == "" {
		tmp, err := os.MkdirTemp("", "kvlive-integration-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		dir = tmp
	}
	kvliveBin = filepath.Join(dir, "kvlive")
	if _, err := os.Stat(kvliveBin); err != nil {
		if err := buildKvlive(kvliveBin); err != nil {
			fmt.Fprintln(os.Stderr, "integration: build kvlive:", err)
			return 1
		}
	}
	// The API servers started ahead for tests that never came stop here,
	// and every test's own stop ends before the binary does.
	defer framework.Shutdown()
	return m.Run()
}

// buildKvlive builds the binary as the image's build does (Dockerfile):
// what the tests run and the bench measures (its resident memory counts
// the binary's pages) is what users run. It builds beside the target and
// renames, so a build cut short never leaves a binary that looks whole.
func buildKvlive(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	build := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags=-s -w", "-o", tmp, "./cmd/kvlive")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Dir = ".." // the module root: go test runs in the package directory
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
