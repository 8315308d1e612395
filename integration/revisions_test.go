//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/pruner"
)

// TestPrunerDeletesOnlySupersededRevisionsItCreated edits an instance type
// three times under `kvlive run` (default --revision-retention 1): each VM
// ends with its first pin (KubeVirt's, never kvlive's to delete), the
// previous generation (undo's) and the current one; the audit log shows
// kvlive deleted exactly the first generation kvlive created of each VM,
// once, and nothing else. `kvlive revisions prune --dry-run` with retention
// 0 lists the previous generations and deletes nothing; without --dry-run
// it deletes them, and no VM loses its pin.
func TestPrunerDeletesOnlySupersededRevisionsItCreated(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 12, itSmall: 4}})
	proc := e.runKvlive("all stages")
	e.waitGenerations()
	edited, others := e.selectShapes(onInstancetype(itMedium)), e.selectShapes(onInstancetype(itSmall))
	before := e.view()
	firstPin := func(s vmShape) string { return before.vms[s.key()].Status.InstancetypeRef.ControllerRevisionRef.Name }
	var gens []metav1.Object
	for i, size := range []struct {
		vcpus uint32
		mem   string
	}{{3, "6Gi"}, {4, "8Gi"}, {5, "10Gi"}} {
		it, eventID := e.editInstancetype(itMedium, size.vcpus, size.mem)
		if p := e.follow(eventID); len(p.Outcomes) != len(edited) {
			t.Fatalf("edit %d: %d outcomes, want %d", i+1, len(p.Outcomes), len(edited))
		}
		gens = append(gens, it)
	}
	owns := func(want func(s vmShape) []string) func(clusterView, vmShape) string {
		return func(v clusterView, s vmShape) string {
			var got []string
			for _, cr := range v.revs {
				if owner := metav1.GetControllerOf(cr); owner != nil && owner.UID == v.vms[s.key()].UID {
					got = append(got, cr.Name)
				}
			}
			slices.Sort(got)
			w := want(s)
			slices.Sort(w)
			if !slices.Equal(got, w) {
				return fmt.Sprintf("owns %v, want %v", got, w)
			}
			return ""
		}
	}
	e.waitSettled("each VM owning its first pin, the previous generation and the current one", edited, owns(func(s vmShape) []string {
		return []string{firstPin(s), kubevirtRevisionName(s.name, gens[1]), kubevirtRevisionName(s.name, gens[2])}
	}))
	e.waitSettled("VMs on another instance type keeping their pin", others, owns(func(s vmShape) []string { return []string{firstPin(s)} }))
	wantDeleted := map[string]bool{}
	for _, s := range edited {
		wantDeleted[s.namespace+"/"+kubevirtRevisionName(s.name, gens[0])] = true
	}
	e.checkDeletes(wantDeleted)
	if m := e.metricsOf(proc); !strings.Contains(m, fmt.Sprintf("kvlive_revisions_pruned_total %d\n", len(edited))) {
		t.Errorf("/metrics lacks kvlive_revisions_pruned_total %d", len(edited))
	}
	// What kvlive run counts as settling, exported: by now (every
	// revision pruned) nothing is left to look at. Whether the count
	// holds what is in flight is pruner.TestBacklogCountsTheVMsLeftToPrune's.
	e.waitFor("the pruner's backlog to drain", time.Minute, func() (bool, string) {
		m := e.metricsOf(proc)
		return strings.Contains(m, "\n"+prunerBacklogDrained), metricLines(m, "kvlive_queue_depth")
	})

	out := e.kvliveCommand(time.Minute, "revisions", "prune", "-A", "--dry-run", "--revision-retention", "0", "-o", "json", "--kubeconfig", e.kubeconfig)
	var cands []pruner.Candidate
	if err := json.Unmarshal([]byte(out), &cands); err != nil {
		t.Fatalf("prune --dry-run -o json: %v\n%s", err, out)
	}
	var listed, previous []string
	for _, c := range cands {
		listed = append(listed, c.Namespace+"/"+c.Revision)
	}
	for _, s := range edited {
		previous = append(previous, s.namespace+"/"+kubevirtRevisionName(s.name, gens[1]))
	}
	slices.Sort(listed)
	slices.Sort(previous)
	if !slices.Equal(listed, previous) {
		t.Errorf("prune --dry-run --revision-retention 0 lists %v, want each VM's previous generation %v", listed, previous)
	}
	e.checkDeletes(wantDeleted)

	e.kvliveCommand(time.Minute, "revisions", "prune", "-A", "--revision-retention", "0", "--kubeconfig", e.kubeconfig)
	for _, name := range previous {
		wantDeleted[name] = true
	}
	e.checkDeletes(wantDeleted)
	e.waitSettled("each VM owning its first pin and the current generation", edited, owns(func(s vmShape) []string {
		return []string{firstPin(s), kubevirtRevisionName(s.name, gens[2])}
	}))
	e.waitSettled("every edited VM still pinned to the current generation", edited, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, gens[2])
	})
}

// checkDeletes compares kvlive's deletes of ControllerRevisions in the
// audit log with want (namespace/name): each exactly once, nothing else.
func (e *env) checkDeletes(want map[string]bool) {
	e.t.Helper()
	got := map[string]int{}
	for _, ev := range e.kvliveRequests("delete", "controllerrevisions") {
		if ev.ResponseStatus.Code == 200 {
			got[ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name]++
		}
	}
	var problems []string
	for name, n := range got {
		switch {
		case !want[name]:
			problems = append(problems, fmt.Sprintf("%s deleted %d times, never wanted", name, n))
		case n != 1:
			problems = append(problems, fmt.Sprintf("%s deleted %d times", name, n))
		}
	}
	for name := range want {
		if got[name] == 0 {
			problems = append(problems, name+" not deleted")
		}
	}
	report(e.t, "kvlive's deletes of ControllerRevisions, from the audit log", problems)
}
