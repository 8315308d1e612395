package framework

import (
	"os"
	"path/filepath"
	"testing"
)

// binDir is where hack/tools.sh puts the server binaries, relative to the
// repository root.
const binDir = ".bin"

// RepoRoot returns the repository root: the nearest directory at or above
// the working directory that holds a go.mod. go test runs each package in its
// own directory, so this is the kvlive module root.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("framework: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("framework: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// binaries returns the paths of server binaries in .bin/, in the order
// named, and fails the test with the fix when any is missing.
func binaries(t testing.TB, names ...string) []string {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), binDir)
	paths := make([]string, len(names))
	var missing []string
	for i, n := range names {
		paths[i] = filepath.Join(dir, n)
		if _, err := os.Stat(paths[i]); err != nil {
			missing = append(missing, paths[i])
		}
	}
	if len(missing) > 0 {
		t.Fatalf("framework: %v missing; build the test servers with hack/tools.sh "+
			"from the repository root (about 10 minutes the first time, instant afterwards)", missing)
	}
	return paths
}

// Binary returns the path of a tool hack/tools.sh built into .bin/
// (kubectl, nats-server, …), failing the test with the fix when it is
// missing.
func Binary(t testing.TB, name string) string {
	t.Helper()
	return binaries(t, name)[0]
}
