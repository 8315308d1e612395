//go:build integration

package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"kvlive/events"
	"kvlive/planner/offline"
)

// TestPlanPredictsTheFleet runs `kvlive plan` against the real API server
// after an edit that no kvlive is running to roll out: every VM's predicted
// result matches what the fleet's shape dictates, the table ends with the
// counts, and nothing is written.
func TestPlanPredictsTheFleet(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 3, perIT: map[string]int{itMedium: 24, itSmall: 4}})
	e.editInstancetype(itMedium, 3, "6Gi")

	gets := len(e.kvliveRequests("get", "controllerrevisions"))
	out := e.kvliveCommand(time.Minute, "plan", "clusterinstancetype/"+itMedium, "-A", "-o", "json", "--kubeconfig", e.kubeconfig)
	// The API server selected the revisions by the generations the pins
	// name (offline.Involved), and none had to be read by name.
	selected := slices.ContainsFunc(e.auditStage("ResponseStarted", "watch", "controllerrevisions"), func(ev auditEvent) bool {
		return strings.HasPrefix(ev.UserAgent, kvliveUserAgent) && strings.Contains(ev.RequestURI, "object-generation")
	})
	if !selected {
		t.Error("kvlive plan's revision watch does not select by object-generation")
	}
	if n := len(e.kvliveRequests("get", "controllerrevisions")) - gets; n != 0 {
		t.Errorf("kvlive plan read %d revisions by name; the selection should have brought every pinned one", n)
	}
	var report offline.Report
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	edited := e.selectShapes(onInstancetype(itMedium))
	got := map[string]offline.VMReport{}
	for _, vm := range report.VMs {
		got[vm.Namespace+"/"+vm.Name] = vm
	}
	if len(got) != len(edited) {
		t.Errorf("%d VMs planned, want %d", len(got), len(edited))
	}
	for _, s := range edited {
		vm := got[s.key()]
		if vm.Action != s.expected() {
			t.Errorf("%s: %s (%s), want %s", s.key(), vm.Action, vm.Reason, s.expected())
		}
		if s.running && !hasChange(vm.Changes, "cpu.sockets", "2", "3") {
			t.Errorf("%s: changes %+v lack cpu.sockets 2→3", s.key(), vm.Changes)
		}
	}
	if report.Summary[string(events.ResultLive)]+report.Summary[string(events.ResultRestart)]+report.Summary[string(events.ResultNextBoot)] != len(edited) {
		t.Errorf("summary %v does not add up to %d VMs", report.Summary, len(edited))
	}

	table := e.kvliveCommand(time.Minute, "plan", "clusterinstancetype/"+itMedium, "-n", namespaceName(0), "--kubeconfig", e.kubeconfig)
	if !strings.Contains(table, "NAMESPACE") || !strings.Contains(table, " VMs: ") || strings.Contains(table, namespaceName(1)+" ") {
		t.Errorf("plan -n %s table:\n%s", namespaceName(0), table)
	}
	e.checkWrites(nil, e.shapes)
}

func hasChange(changes []events.Change, field, from, to string) bool {
	for _, c := range changes {
		if c.Field == field && c.From == from && c.To == to {
			return true
		}
	}
	return false
}
