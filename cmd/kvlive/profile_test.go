package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProfileFlag: --profile writes the profile it names to
// --profile-output when the command ends, as kubectl's does; a name pprof
// does not know is a usage error.
func TestProfileFlag(t *testing.T) {
	for _, name := range []string{"cpu", "heap", "goroutine", "mutex"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name+".pprof")
			g := &globals{}
			root := newRootWith(g)
			root.SetOut(&bytes.Buffer{})
			root.SetArgs([]string{"version", "--profile", name, "--profile-output", path})
			if err := root.ExecuteContext(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := g.profile.stop(); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// pprof's format is gzipped protobuf.
			if len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
				t.Errorf("%s holds %d bytes, not a gzipped pprof profile", path, len(raw))
			}
		})
	}
	if _, err := kvlive(t, "version", "--profile", "everything"); err == nil || !strings.Contains(err.Error(), "--profile") {
		t.Errorf("--profile everything: %v, want a usage error", err)
	}
}
