//go:build integration && bench

package integration

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	instancetypeapi "kubevirt.io/api/instancetype"

	"kvlive/events"
)

// benchSwitchPlan: the time `kvlive plan --from --to -A` takes to preview
// a switch of 1,000 VMs (what kvlive switch does before it asks), on a
// cluster with no other revisions and then with 100,000 revisions of
// unrelated objects, the median of three runs each.
func benchSwitchPlan(t *testing.T, tab *benchTable) {
	vms := min(*benchVMs, 1000)
	const unrelated = 100000
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: vms}})
	plan := func() time.Duration {
		var runs []time.Duration
		for range 3 {
			start := time.Now()
			e.kvliveCommand(5*time.Minute, "plan", "--from", "clusterinstancetype/"+itMedium, "--to", "clusterinstancetype/"+itLarge, "-A", "-o", "json", "--kubeconfig", e.kubeconfig)
			runs = append(runs, time.Since(start))
		}
		slices.Sort(runs)
		return runs[1]
	}
	alone := plan()
	e.createUnrelatedRevisions(unrelated)
	crowded := plan()
	what := fmt.Sprintf("kvlive plan --from --to of %d VMs (a switch's preview), median of 3", vms)
	tab.add("switch", what+", no other revisions", alone.Round(time.Millisecond).String(), "")
	ratio := crowded.Seconds() / alone.Seconds()
	tab.aim("switch", fmt.Sprintf("%s, %d unrelated revisions present", what, unrelated), fmt.Sprintf("%v: %.2f× none", crowded.Round(time.Millisecond), ratio), "≤ 1.10× none", ratio <= 1.10)
}

// createUnrelatedRevisions creates n instancetype ControllerRevisions of
// 100 objects no VM of the fleet references, in a namespace of their own.
func (e *env) createUnrelatedRevisions(n int) {
	e.t.Helper()
	const ns = "unrelated"
	if _, err := e.clients.Kube.CoreV1().Namespaces().Create(e.ctx, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	data := []byte(`{"apiVersion":"instancetype.kubevirt.io/v1beta1","kind":"VirtualMachineClusterInstancetype","metadata":{"name":"x"},"spec":{"cpu":{"guest":1},"memory":{"guest":"1Gi"}}}`)
	g, ctx := errgroup.WithContext(e.ctx)
	g.SetLimit(seedWorkers)
	for i := range n {
		g.Go(func() error {
			cr := &appsv1.ControllerRevision{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated-" + strconv.Itoa(i), Labels: map[string]string{
					instancetypeapi.ControllerRevisionObjectKindLabel:       events.KindClusterInstancetype,
					instancetypeapi.ControllerRevisionObjectNameLabel:       "other-" + strconv.Itoa(i%100),
					instancetypeapi.ControllerRevisionObjectGenerationLabel: strconv.Itoa(1 + i/100),
				}},
				Data: runtime.RawExtension{Raw: data},
			}
			_, err := e.clients.Kube.AppsV1().ControllerRevisions(ns).Create(ctx, cr, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		e.t.Fatal(err)
	}
}
