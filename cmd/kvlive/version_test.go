package main

import (
	"encoding/json"
	"os"
	"testing"
)

// TestVersion reports the KubeVirt API kvlive speaks.
func TestVersion(t *testing.T) {
	out, err := kvlive(t, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.KubeVirtAPI != "v1.9.0" || v.Go == "" || v.Version == "" {
		t.Errorf("version = %+v, want kubevirt.io/api v1.9.0 and the Go version", v)
	}
}

// TestInvokedAs: the commands kvlive prints run as the user ran it.
func TestInvokedAs(t *testing.T) {
	saved := os.Args[0]
	t.Cleanup(func() { os.Args[0] = saved })
	for arg0, want := range map[string]string{
		"bin/kvlive":                        "bin/kvlive",
		"kvlive":                            "kvlive",
		"/usr/local/bin/kubectl-kvlive":     "kubectl kvlive",
		"/tmp/go-build4242/b001/exe/kvlive": "go run ./cmd/kvlive",
		"/home/me/go/bin/kvlive":            "/home/me/go/bin/kvlive",
	} {
		os.Args[0] = arg0
		if got := invokedAs(); got != want {
			t.Errorf("invoked as %s: %q, want %q", arg0, got, want)
		}
	}
}
