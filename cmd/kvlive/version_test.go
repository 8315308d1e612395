package main

import (
	"encoding/json"
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
