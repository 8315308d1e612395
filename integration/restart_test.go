//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/planner/offline"
	"kvlive/rollout"
)

// restartRequested finds the event id in kvlive restart's output.
var restartRequested = regexp.MustCompile(`restart requested: (restart/\S+)`)

// TestRestartRestartsPendingVMsWithinItsBudget edits an instance type to
// fewer vCPUs, which leaves every running VM RestartRequired, then asks
// kvlive restart --pending to restart them two at a time, with two kvlive
// replicas running. One VM is annotated kvlive.io/do-not-disrupt before,
// another (in the last batch) after the restart was planned: neither is
// restarted, nor is a stopped VM. The first replica is killed mid-way and
// a third takes over. Every other running VM gets exactly one restart
// request (a Stop naming its VMI, then a Start: the audit log), runs a new
// VMI at the new sockets without RestartRequired, and has the verdict
// restarted; never more than two restarts are under way at once, from a
// request to its new VMI (the audit log again).
func TestRestartRestartsPendingVMsWithinItsBudget(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 12}})
	first := e.runKvlive("first", "--observe-timeout", "30s")
	e.runKvlive("second", "--observe-timeout", "30s")
	e.waitGenerations()
	running := e.selectShapes(func(s vmShape) bool { return s.running })
	slices.SortFunc(running, func(a, b vmShape) int { return strings.Compare(a.key(), b.key()) })
	early, late := running[0], running[len(running)-1]
	e.optOut(early)

	_, eventID := e.editInstancetype(itMedium, 1, "4Gi") // fewer sockets: a restart, never a hotplug
	e.follow(eventID)
	e.waitSettled("RestartRequired on every running VM", running, func(v clusterView, s vmShape) string {
		if _, ok := instancetype.RestartRequired(v.vms[s.key()]); !ok {
			return "no RestartRequired"
		}
		return ""
	})
	before := e.view()

	out, stderr, err := e.kvliveOnce(2*time.Minute, "restart", "--pending", "clusterinstancetype/"+itMedium, "-A", "--restart-budget", "2",
		"--yes", "-o", "json", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if err != nil {
		t.Fatalf("restart: %v\n%s", err, stderr.String())
	}
	var preview offline.Report
	if err := json.Unmarshal([]byte(out), &preview); err != nil {
		t.Fatalf("restart -o json: %v\n%s", err, out)
	}
	restarting := len(running) - 1
	if n := preview.Summary[string(events.ResultRestart)]; n != restarting {
		t.Errorf("restart previewed %v; want %d restarts (every running VM but the one opted out)", preview.Summary, restarting)
	}
	m := restartRequested.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("restart printed no id:\n%s", stderr.String())
	}
	id := m[1]
	if rec := e.waitPlanned(id); fmt.Sprint(rec.Batches) != "[2 2 2 2]" {
		t.Errorf("restart planned in batches %v, want [2 2 2 2]: a budget of 2", rec.Batches)
	}
	e.optOut(late) // a user opts out after the restart was planned
	if at := e.followUntil(id, func(p rollout.Progress) bool { return p.Counts()[events.ResultRestart] >= 2 }); at.Done() {
		t.Fatalf("the restart finished before kvlive was killed; the test proves nothing")
	}
	first.kill()
	e.runKvlive("after the kill", "--observe-timeout", "30s")
	progress := e.follow(id)

	restarted := slices.DeleteFunc(slices.Clone(running), func(s vmShape) bool { return s == early || s == late })
	for _, s := range e.shapes {
		o := progress.Outcomes[e.uids[s.key()]]
		switch {
		case slices.Contains(restarted, s):
			if o.Result != events.ResultRestart || o.Stopped != string(before.vmis[s.key()].UID) {
				t.Errorf("%s: %s (%s) stopping %q, want restart stopping its VMI %s", s.key(), o.Result, o.Reason, o.Stopped, before.vmis[s.key()].UID)
			}
		case s == early || s == late:
			if o.Result != events.ResultSkip || !strings.Contains(o.Reason, "opted out") {
				t.Errorf("%s, opted out: %s (%s), want skip saying it opted out", s.key(), o.Result, o.Reason)
			}
		default:
			if o.Result != events.ResultSkip || !strings.Contains(o.Reason, "Halted") {
				t.Errorf("%s, stopped: %s (%s), want skip naming its run strategy", s.key(), o.Result, o.Reason)
			}
		}
	}
	e.checkVerdicts(id, 2*time.Minute)
	after := e.view()
	for _, s := range running {
		vm, vmi := after.vms[s.key()], after.vmis[s.key()]
		_, flagged := instancetype.RestartRequired(vm)
		if s == early || s == late {
			if vmi == nil || vmi.UID != before.vmis[s.key()].UID || !flagged {
				t.Errorf("%s, opted out: restarted anyway, or RestartRequired gone", s.key())
			}
			continue
		}
		if vmi == nil || vmi.UID == before.vmis[s.key()].UID || vmi.Spec.Domain.CPU == nil || vmi.Spec.Domain.CPU.Sockets != 1 || flagged {
			t.Errorf("%s: VMI %v, RestartRequired %t; want a new VMI at 1 socket, RestartRequired gone", s.key(), vmi, flagged)
		}
	}
	writes := e.restartWrites()
	for _, s := range e.shapes {
		want := 0
		if slices.Contains(restarted, s) {
			want = 1
		}
		if w := writes[s.key()]; w.applied() != want || w.ok > 1 {
			t.Errorf("%s: kvlive asked for %+v restarts, want %d", s.key(), w, want)
		}
	}
	if most := e.restartsUnderWay(); most > 2 {
		t.Errorf("%d restarts were under way at once, over the budget of 2", most)
	}
}

// optOut annotates the VM kvlive.io/do-not-disrupt=true.
func (e *env) optOut(s vmShape) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, events.DoNotDisruptAnnotation)
	if _, err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Patch(e.ctx, s.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// isRestartRequest reports whether an audited patch asks for a restart.
func isRestartRequest(ev auditEvent) bool {
	return ev.ObjectRef.Subresource == "status" && strings.Contains(string(ev.RequestObject), "stateChangeRequests")
}

// restartWrites reads kvlive's restart requests from the audit log, per VM.
func (e *env) restartWrites() map[string]vmWrites {
	e.t.Helper()
	writes := map[string]vmWrites{}
	for _, ev := range e.kvlivePatches() {
		if !isRestartRequest(ev) {
			continue
		}
		key := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		w := writes[key]
		switch {
		case ev.ResponseStatus.Code == 200:
			w.ok++
		case ev.ResponseStatus.Code >= 500:
			w.cutOff++
		}
		writes[key] = w
	}
	return writes
}

// restartsUnderWay is the most restarts under way at once, from the audit
// log: each from kvlive's request (its answer) to the creation of the VM's
// next VMI.
func (e *env) restartsUnderWay() int {
	e.t.Helper()
	asked := map[string]time.Time{}
	for _, ev := range e.kvlivePatches() {
		if isRestartRequest(ev) && ev.ResponseStatus.Code == 200 {
			asked[ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name] = ev.Done
		}
	}
	var spans []span
	for _, ev := range e.auditEvents("create", "virtualmachineinstances") {
		key := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		if at, ok := asked[key]; ok && ev.Done.After(at) {
			spans = append(spans, span{at, ev.Done})
			delete(asked, key)
		}
	}
	if len(asked) > 0 {
		e.t.Errorf("restarts asked for without a new VMI in the audit log: %v", asked)
	}
	return maxOverlap(spans)
}

// TestRestartWaitsForItsWindow restarts six VMs one at a time inside a
// restart window that opens every minute for 5 seconds. Requested outside
// it, the restart waits, and rollout status says until when; every restart
// request then reaches the API server inside a window (the audit log),
// and the six, a batch a second at best, take more than one window: the
// rollout pauses as the window closes and goes on when it opens again.
func TestRestartWaitsForItsWindow(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 8}})
	e.runKvlive("first", "--observe-timeout", "30s")
	e.waitGenerations()
	running := e.selectShapes(func(s vmShape) bool { return s.running })
	_, eventID := e.editInstancetype(itMedium, 1, "4Gi")
	e.follow(eventID)
	e.waitSettled("RestartRequired on every running VM", running, func(v clusterView, s vmShape) string {
		if _, ok := instancetype.RestartRequired(v.vms[s.key()]); !ok {
			return "no RestartRequired"
		}
		return ""
	})
	const open = 5 * time.Second
	// Ask well outside a window: between 20s and 40s past a minute.
	if s := time.Now().Second(); s < 20 || s > 40 {
		time.Sleep(time.Duration((80-s)%60) * time.Second)
	}
	out := e.kvliveCommand(2*time.Minute, "restart", "--pending", "clusterinstancetype/"+itMedium, "-A", "--restart-budget", "1",
		"--restart-window", "* * * * *", "--restart-window-duration", open.String(), "--yes", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	m := restartRequested.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("restart printed no id:\n%s", out)
	}
	id := m[1]
	e.waitFor("the restart to wait for its window", time.Minute, func() (bool, string) {
		st := e.status(id)
		return st.Control.State == events.StatePaused && strings.Contains(st.Control.Reason, "waits until it opens at") && !st.Control.ResumeAt.IsZero(),
			fmt.Sprintf("%s: %s", st.Control.State, st.Control.Reason)
	})
	progress := e.follow(id)
	if n := progress.Counts()[events.ResultRestart]; n != len(running) {
		t.Fatalf("%v; want all %d running VMs restarted", progress.Counts(), len(running))
	}
	windows := map[string]bool{}
	for _, ev := range e.kvlivePatches() {
		if !isRestartRequest(ev) {
			continue
		}
		at := ev.Received
		// A request decided inside the window reaches the server within a
		// moment (on a loaded machine, a few): three seconds of slack, far
		// from the 55 a minute's window leaves closed.
		if since := at.Sub(at.Truncate(time.Minute)); since >= open+3*time.Second {
			t.Errorf("%s/%s: restart asked for %s past the minute, outside the %s window", ev.ObjectRef.Namespace, ev.ObjectRef.Name, since, open)
		}
		windows[at.Truncate(time.Minute).Format(time.TimeOnly)] = true
	}
	if len(windows) < 2 {
		t.Errorf("the restarts went in windows %v; six one at a time cannot fit one 5s window", windows)
	}
}

// TestRestartPendingPolicyRestartsWhatTheRolloutLeft edits an instance type
// whose rollout policy says restart: pending with a budget of 2, under two
// kvlive replicas. The edit leaves every running VM RestartRequired; once
// its rollout has settled, kvlive asks for one restart of those VMs (one
// request in the events stream, however many replicas swept), which
// restarts each of them once, two at a time, and no stopped VM.
func TestRestartPendingPolicyRestartsWhatTheRolloutLeft(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 8}})
	for _, name := range []string{"first", "second"} {
		e.runKvlive(name, "--observe-timeout", "30s", "--max-age", "40s") // sweeps every 10s
	}
	e.waitGenerations()
	e.annotate(itMedium, "restart: pending\nrestartBudget: \"2\"\n")
	running := e.selectShapes(func(s vmShape) bool { return s.running })
	_, eventID := e.editInstancetype(itMedium, 1, "4Gi")
	if p := e.follow(eventID); p.Counts()[events.ResultRestart] != len(running) {
		t.Fatalf("the edit: %v, want a restart predicted for each of the %d running VMs", p.Counts(), len(running))
	}
	before := e.view()
	id := events.RestartEventID(events.RestartAfterID(eventID))
	if rec := e.waitPlanned(id); fmt.Sprint(rec.Batches) != "[2 2 2]" {
		t.Errorf("the restart after %s: batches %v, want [2 2 2]: its policy's budget of 2", eventID, rec.Batches)
	}
	progress := e.follow(id)
	if n := progress.Counts()[events.ResultRestart]; n != len(running) || len(progress.Outcomes) != len(running) {
		t.Errorf("the restart after the edit: %v, want exactly the %d running VMs restarted", progress.Counts(), len(running))
	}
	e.waitSettled("a new VMI at 1 socket without RestartRequired", running, func(v clusterView, s vmShape) string {
		vmi := v.vmis[s.key()]
		if _, flagged := instancetype.RestartRequired(v.vms[s.key()]); flagged || vmi == nil || vmi.UID == before.vmis[s.key()].UID || vmi.Spec.Domain.CPU.Sockets != 1 {
			return "not restarted at 1 socket"
		}
		return ""
	})
	writes := e.restartWrites()
	for _, s := range e.shapes {
		if w, want := writes[s.key()], map[bool]int{true: 1}[s.running]; w.applied() != want || w.ok > 1 {
			t.Errorf("%s: kvlive asked for %+v restarts, want %d", s.key(), w, want)
		}
	}
	if most := e.restartsUnderWay(); most > 2 {
		t.Errorf("%d restarts were under way at once, over the budget of 2", most)
	}
	var asked []events.RestartRequest
	for _, body := range e.streamBodies(events.StreamEvents, events.RestartSubject()) {
		var r events.RestartRequest
		if _, err := events.Decode(body, events.TypeRestartRequested, &r); err != nil {
			t.Fatal(err)
		}
		asked = append(asked, r)
	}
	if len(asked) != 1 || asked[0].After != eventID {
		t.Errorf("restart requests %+v, want one, after %s", asked, eventID)
	}
}
