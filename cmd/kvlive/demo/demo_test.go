package demo

import (
	"bytes"
	"context"
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
