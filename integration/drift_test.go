//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/drift"
	"kvlive/events"
)

// TestDriftShowsWhereEveryVMStands reads the fleet's drift from the
// cluster while an edit's rollout is paused (every VM one generation
// behind), once it completed (every VM on the latest, the VMs KubeVirt
// wants restarted and the stopped ones counted), and after a user set one
// VM's pin back by hand: `kvlive drift` and kvlive_vms_behind from `kvlive
// run` agree with the cluster each time, and drift names the VM.
func TestDriftShowsWhereEveryVMStands(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 8, itLarge: 4}})
	proc := e.runKvlive("all stages")
	e.waitGenerations()
	medium := e.instancetype(itMedium)
	mediumRef := events.Ref{Kind: events.KindClusterInstancetype, Name: itMedium}
	next := events.EventID(events.KindClusterInstancetype, string(medium.UID), medium.Generation+1)
	e.rolloutCommand("pause", next, "--ahead")
	edited := e.selectShapes(onInstancetype(itMedium))
	oldPin := e.view().vms[edited[0].key()].Status.InstancetypeRef.ControllerRevisionRef.Name
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")

	stopped := 0
	for _, s := range edited {
		if !s.running {
			stopped++
		}
	}
	behind := e.driftRow(mediumRef)
	if behind.Generation != it.Generation || behind.Total != len(edited) || behind.Behind != len(edited) || behind.MaxLag != 1 ||
		behind.Latest != 0 || behind.Stopped != stopped || behind.RestartRequired != 0 {
		t.Errorf("drift while the rollout is paused: %+v; want all %d VMs one generation behind generation %d, %d stopped", countsOf(behind), len(edited), it.Generation, stopped)
	}
	e.waitMetric(proc, mediumRef, len(edited))
	table := e.kvliveCommand(time.Minute, "drift", "-A", "--kubeconfig", e.kubeconfig)
	if row := fmt.Sprintf(`clusterinstancetype/%s\s+%d\s+%d\s+0\s+%d\s+1\s`, itMedium, it.Generation, len(edited), len(edited)); !regexp.MustCompile(row).MatchString(table) {
		t.Errorf("kvlive drift -A lacks the paused row %q:\n%s", row, table)
	}

	e.rolloutCommand("resume", next)
	progress := e.follow(eventID)
	e.waitSettled("every edited VM pinned to the new generation, as the stand-in sees it", edited, func(v clusterView, s vmShape) string {
		if p := pinProblem(v, s, it); p != "" {
			return p
		}
		return standinProblem(v, s, progress.Outcomes[e.uids[s.key()]].Result, it.Spec)
	})
	restarts := progress.Counts()[events.ResultRestart]
	done := e.driftRow(mediumRef)
	if done.Latest != len(edited) || done.Behind != 0 || done.RestartRequired != restarts || done.Stopped != stopped {
		t.Errorf("drift once the rollout completed: %+v; want all %d VMs latest, %d with RestartRequired, %d stopped", countsOf(done), len(edited), restarts, stopped)
	}
	e.waitMetric(proc, mediumRef, 0)

	// A user pins one VM back by hand; no event follows, drift sees it.
	back := edited[0]
	vms := e.clients.Virt.KubevirtV1().VirtualMachines(back.namespace)
	vm, err := vms.Get(e.ctx, back.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm.Status.InstancetypeRef.ControllerRevisionRef.Name = oldPin
	if _, err := vms.UpdateStatus(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitMetric(proc, mediumRef, 1)
	row := e.driftRow(mediumRef, "-n", back.namespace)
	var named []string
	for _, v := range row.Members {
		if v.State != drift.StateLatest {
			named = append(named, fmt.Sprintf("%s/%s %s lag %d", v.Namespace, v.Name, v.State, v.Lag))
		}
	}
	if want := back.key() + " behind lag 1"; len(named) != 1 || named[0] != want {
		t.Errorf("drift -n %s names %v behind; want only %q", back.namespace, named, want)
	}
	if large := e.driftRow(events.Ref{Kind: events.KindClusterInstancetype, Name: itLarge}); large.Latest != large.Total || large.Total == 0 {
		t.Errorf("drift of %s, never edited: %+v; want every VM latest", itLarge, countsOf(large))
	}
}

// driftRow runs `kvlive drift KIND/NAME -o json` (in all namespaces unless
// extra says otherwise) and returns the object's row.
func (e *env) driftRow(ref events.Ref, extra ...string) drift.Row {
	e.t.Helper()
	if len(extra) == 0 {
		extra = []string{"-A"}
	}
	out := e.kvliveCommand(time.Minute, append([]string{"drift", ref.String(), "-o", "json", "--kubeconfig", e.kubeconfig}, extra...)...)
	var rows []drift.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].Object != ref {
		e.t.Fatalf("kvlive drift %s -o json: %v, want one row of it:\n%s", ref, err, out)
	}
	return rows[0]
}

// waitMetric waits until kvlive run's /metrics says n VMs of ref are
// behind.
func (e *env) waitMetric(p *kvliveProc, ref events.Ref, n int) {
	e.t.Helper()
	line := fmt.Sprintf("kvlive_vms_behind{object=%q} %d\n", ref.String(), n)
	e.waitFor(strings.TrimSpace(line), time.Minute, func() (bool, string) {
		metrics := e.metricsOf(p)
		for _, l := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(l, "kvlive_vms_behind{") && strings.Contains(l, ref.String()) {
				return l+"\n" == line, l
			}
		}
		return false, "no series of " + ref.String()
	})
}

// countsOf is a row without its VMs, for messages.
func countsOf(r drift.Row) drift.Row {
	r.Members = nil
	return r
}
