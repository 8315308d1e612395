package drift_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"kvlive/drift"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// BenchmarkMeasure measures a scrape's drift of 10,000 VMs: counts only
// (kvlive_vms_behind) against rows with every VM (kvlive drift -o wide).
func BenchmarkMeasure(b *testing.B) {
	it := testenv.ClusterInstancetype("u1.medium", 2, "4Gi")
	objs := []runtime.Object{it}
	for i := range 10000 {
		vm := testenv.VM("ns", fmt.Sprintf("vm-%05d", i), it.Name)
		objs = append(objs, testenv.Pin(b, vm, it), vm)
	}
	c, err := kube.CacheOf(objs...)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []drift.Filter{{CountsOnly: true}, {}} {
		b.Run(fmt.Sprintf("countsOnly=%t", f.CountsOnly), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				drift.Measure(c, f)
			}
		})
	}
}
