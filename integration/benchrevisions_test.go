//go:build integration && bench

package integration

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	instancetypeapi "kubevirt.io/api/instancetype"
)

var benchRevisionEdits = 10

// benchRevisions: the ControllerRevisions a fleet keeps after ten edits,
// with kvlive keeping all of them (--revision-retention -1, as before the
// pruner), then after `kvlive revisions prune` at the default retention,
// and how long that took.
func benchRevisions(t *testing.T, tab *benchTable) {
	vms := min(*benchVMs, 1000)
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: vms}})
	proc := e.runKvlive("kvlive keeping every revision", "--revision-retention", "-1")
	e.waitGenerations()
	for i := range benchRevisionEdits {
		_, eventID := e.editInstancetype(itMedium, uint32(3+i%2), fmt.Sprintf("%dGi", 6+i%2))
		e.follow(eventID)
	}
	proc.terminate()
	kept := e.countRevisions()
	start := time.Now()
	e.kvliveCommand(10*time.Minute, "revisions", "prune", "-A", "--kubeconfig", e.kubeconfig)
	took := time.Since(start)
	after := e.countRevisions()
	what := fmt.Sprintf("%d VMs after %d edits", vms, benchRevisionEdits)
	tab.add("revisions", what+", every revision kept", fmt.Sprintf("%d (%.1f per VM)", kept, float64(kept)/float64(vms)), "")
	tab.aim("revisions", what+", after kvlive revisions prune (retention 1)", fmt.Sprintf("%d (%.1f per VM, %.2f× kept), pruned in %v", after, float64(after)/float64(vms), float64(after)/float64(kept), took.Round(time.Millisecond)),
		"≤ 3 per VM: KubeVirt's first pin, the previous, the current", after <= 3*vms)
}

// countRevisions counts the cluster's instancetype ControllerRevisions.
func (e *env) countRevisions() int {
	e.t.Helper()
	list, err := e.clients.Kube.AppsV1().ControllerRevisions("").List(e.ctx, metav1.ListOptions{LabelSelector: instancetypeapi.ControllerRevisionObjectKindLabel})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(list.Items)
}
