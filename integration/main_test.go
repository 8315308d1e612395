//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// kvliveBin is the kvlive binary TestMain builds for every test to run.
var kvliveBin string

// TestMain builds the kvlive binary once, from the working tree, as the
// image does, then runs the tests.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kvlive-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kvliveBin = filepath.Join(dir, "kvlive")
	// The image's build (Dockerfile): what the tests run and the bench
	// measures (its resident memory counts the binary's pages) is what
	// users run.
	build := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags=-s -w", "-o", kvliveBin, "./cmd/kvlive")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Dir = ".." // the module root: go test runs in the package directory
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: build kvlive:", err)
		return 1
	}
	return m.Run()
}
