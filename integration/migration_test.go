//go:build integration

package integration

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/integration/framework"
)

// TestRealKubeVirtLiveRolloutMigrates rolls a live change (sockets and
// guest memory) out to 21 running VMs on four nodes under KubeVirt's own
// virt-controller: its workload updater migrates each VMI, at most five at
// a time, the players run the migrations (3 s each) and finish the
// hot-plugs on their targets, and kvlive's verdict on every VM is live,
// read at its migration's end. The migrations are counted from the API
// server; one VMI's first migration fails, and KubeVirt's next one carries
// its change.
func TestRealKubeVirtLiveRolloutMigrates(t *testing.T) {
	e := newKubeVirtEnv(t)
	e.kv.Handler.SetMigrationDuration(3 * time.Second)
	e.createInstancetype("u1.medium", 2, "2Gi")
	var fleet []kvVM
	for i := range 21 {
		fleet = append(fleet, kvVM{name: fmt.Sprintf("vm-%02d", i), running: true})
	}
	e.createVMs("u1.medium", fleet...)
	e.kv.Handler.Inject(kvNamespace, "vm-07", framework.Fault{Migrations: 1})
	// Each verdict waits for its migration's turn (the queue deadline) and
	// then a minute from the migration's start.
	e.runKvlive("all stages", "--observe-timeout", "1m", "--migration-queue-timeout", "10m")
	e.waitWatched(1)

	eventID := e.editInstancetypeTo("u1.medium", 3, "3Gi")
	progress := e.follow(eventID)
	want := map[string]events.Result{}
	names := make([]string, len(fleet))
	for i, v := range fleet {
		want[v.name], names[i] = events.ResultLive, v.name
	}
	e.checkResults(progress, want)
	e.checkVerdicts(eventID, 5*time.Minute)
	e.checkAgainstKubeVirt(progress, names)

	// The migrations, as the API server keeps them: KubeVirt's workload
	// updater made one for every VMI (two for the one whose first failed).
	list, err := e.clients.Virt.KubevirtV1().VirtualMachineInstanceMigrations(kvNamespace).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	succeeded, failed := map[string]int{}, map[string]int{}
	for _, m := range list.Items {
		if _, ok := m.Annotations[virtv1.WorkloadUpdateMigrationAnnotation]; !ok || !strings.HasPrefix(m.Name, "kubevirt-workload-update-") {
			t.Errorf("migration %s is not the workload updater's", m.Name)
		}
		switch m.Status.Phase {
		case virtv1.MigrationSucceeded:
			succeeded[m.Spec.VMIName]++
		case virtv1.MigrationFailed:
			failed[m.Spec.VMIName]++
		default:
			t.Errorf("migration %s of %s is %s after the rollout", m.Name, m.Spec.VMIName, m.Status.Phase)
		}
	}
	for _, n := range names {
		if succeeded[n] != 1 {
			t.Errorf("%s: %d succeeded migrations, want 1", n, succeeded[n])
		}
	}
	if len(failed) != 1 || failed["vm-07"] != 1 {
		t.Errorf("failed migrations %v, want vm-07's first alone", failed)
	}
	// Never more than KubeVirt's five at once, as the players ran them.
	ran := e.kv.Handler.Migrations()
	if n := maxConcurrent(ran); n > 5 {
		t.Errorf("%d migrations ran at once, KubeVirt runs at most 5", n)
	}
	t.Logf("%d migrations (%d succeeded, %d failed), at most %d at once", len(list.Items), len(succeeded), len(failed), maxConcurrent(ran))
}

// maxConcurrent is the most migrations that overlapped in time.
func maxConcurrent(ms []framework.Migration) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, m := range ms {
		if m.Started.IsZero() || m.Ended.IsZero() {
			continue
		}
		edges = append(edges, edge{m.Started, 1}, edge{m.Ended, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	n, top := 0, 0
	for _, e := range edges {
		n += e.delta
		top = max(top, n)
	}
	return top
}
