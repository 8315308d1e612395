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
	"k8s.io/apimachinery/pkg/types"

	"kvlive/events"
	"kvlive/planner/offline"
	"kvlive/rollout"
)

// undoRequested and switched find the event ids in kvlive rollout undo's
// and kvlive switch's output.
var (
	undoRequested = regexp.MustCompile(`undo requested: (undo/\S+)`)
	switched      = regexp.MustCompile(`switch requested: (\S+)`)
)

// TestUndoMovesBackWhatTheRolloutMoved edits an instance type, then a user
// switches one VM to another instance type by hand and deletes another;
// `kvlive rollout undo` asks on a terminal (no: nothing requested) and previews moving the rest back to the revision each
// was pinned to before (naming the two it skips and why), and the undo, a
// rollout of its own, pins each back: one more write per VM (audit log),
// none for the VM the user moved. An undo of the undo is refused, naming
// the original. kvlive is killed mid-undo and another process finishes
// it: still one write per VM. A switch undone switches its VMs back.
func TestUndoMovesBackWhatTheRolloutMoved(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 12, itSmall: 4}})
	first := e.runKvlive("first", "--rate", "4")
	e.waitGenerations()
	edited := e.selectShapes(onInstancetype(itMedium))
	before := e.view()
	pinOf := func(v clusterView, s vmShape) string {
		vm := v.vms[s.key()]
		if vm == nil || vm.Status.InstancetypeRef == nil || vm.Status.InstancetypeRef.ControllerRevisionRef == nil {
			return ""
		}
		return vm.Status.InstancetypeRef.ControllerRevisionRef.Name
	}
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	e.follow(eventID)
	e.waitSettled("every edited VM pinned to the new generation", edited, func(v clusterView, s vmShape) string { return pinProblem(v, s, it) })

	// A user moves one VM elsewhere and deletes another.
	moved, deleted := edited[0], edited[1]
	patch := fmt.Sprintf(`{"spec":{"instancetype":{"name":%q}}}`, itLarge)
	if _, err := e.clients.Virt.KubevirtV1().VirtualMachines(moved.namespace).Patch(e.ctx, moved.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.clients.Virt.KubevirtV1().VirtualMachines(deleted.namespace).Delete(e.ctx, deleted.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the cluster to show the user's changes", time.Minute, func() (bool, string) {
		v := e.view()
		return v.vms[deleted.key()] == nil && v.vms[moved.key()].Spec.Instancetype.Name == itLarge, "not yet"
	})

	// On a terminal, undo shows its plan in brief and asks; "n" requests
	// nothing.
	screen, err := e.kvliveOnTerminal("n", 100, "rollout", "undo", eventID, "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if err == nil || !strings.Contains(screen, "not confirmed: nothing was requested") ||
		!strings.Contains(screen, fmt.Sprintf("Undo %s for these %d VMs? [y/N]", eventID, len(edited))) {
		t.Errorf("rollout undo on a terminal answered n: %v\n%s", err, screen)
	}
	var planned offline.Report
	out := e.kvliveCommand(time.Minute, "plan", "--undo", eventID, "-o", "json", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if err := json.Unmarshal([]byte(out), &planned); err != nil {
		t.Fatalf("plan --undo -o json: %v\n%s", err, out)
	}
	out, stderr, err := e.kvliveOnce(2*time.Minute, "rollout", "undo", events.ShortEventID(eventID), "--yes", "-o", "json",
		"--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if err != nil {
		t.Fatalf("rollout undo: %v\n%s", err, stderr.String())
	}
	var preview offline.Report
	if err := json.Unmarshal([]byte(out), &preview); err != nil {
		t.Fatalf("rollout undo -o json: %v\n%s", err, out)
	}
	skipped := map[string]string{}
	for _, vm := range preview.VMs {
		if vm.Action == events.ResultSkip {
			skipped[vm.Namespace+"/"+vm.Name] = vm.Reason
		}
	}
	if len(preview.VMs) != len(edited) || len(skipped) != 2 || !strings.Contains(skipped[moved.key()], "clusterinstancetype/"+itLarge) ||
		!strings.Contains(skipped[deleted.key()], "deleted") {
		t.Errorf("undo previewed %d VMs (want %d), skipping %v; want %s skipped as on %s and %s as deleted", len(preview.VMs), len(edited), skipped, moved.key(), itLarge, deleted.key())
	}
	if fmt.Sprint(planned.Summary) != fmt.Sprint(preview.Summary) {
		t.Errorf("plan --undo counted %v, rollout undo previewed %v", planned.Summary, preview.Summary)
	}
	m := undoRequested.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("rollout undo printed no undo id:\n%s", stderr.String())
	}
	undoID := m[1]
	// kvlive dies a few VMs into the undo; another finishes it.
	if at := e.followUntil(undoID, func(p rollout.Progress) bool { return len(p.Outcomes) >= 3 }); at.Done() {
		t.Fatalf("the undo finished before kvlive was killed (%d outcomes); the test proves nothing", len(at.Outcomes))
	}
	first.kill()
	e.runKvlive("after the kill")
	progress := e.follow(undoID)
	back := e.selectShapes(func(s vmShape) bool {
		return s.instancetype == itMedium && s.key() != moved.key() && s.key() != deleted.key()
	})
	for _, s := range back {
		if o := progress.Outcomes[e.uids[s.key()]]; !o.Result.Moves() || o.Revision != pinOf(before, s) {
			t.Errorf("%s: undo outcome %s (%s) revision %s, want it moved back to %s", s.key(), o.Result, o.Reason, o.Revision, pinOf(before, s))
		}
	}
	if o := progress.Outcomes[e.uids[moved.key()]]; o.Result != events.ResultSkip {
		t.Errorf("%s, moved by a user: undo outcome %s (%s), want skip", moved.key(), o.Result, o.Reason)
	}
	e.waitSettled("every undone VM pinned as before the edit", back, func(v clusterView, s vmShape) string {
		if got, want := pinOf(v, s), pinOf(before, s); got != want {
			return "pinned to " + got + ", want " + want
		}
		return ""
	})
	writes := e.kvliveWrites()
	for _, s := range back {
		// A patch cut off by the kill may have taken effect; a later one
		// then fails its test op, so at most two are carried out.
		if w := writes[s.key()]; w.ok > 2 || w.ok+w.cutOff < 2 || len(w.untested) > 0 {
			t.Errorf("%s: kvlive's patches %+v, want two in effect: the edit and the undo, each testing what it replaced", s.key(), w)
		}
	}
	if w := writes[moved.key()]; w.applied() != 1 {
		t.Errorf("%s: kvlive patched it %d times, want once (the edit; the undo leaves a VM a user moved)", moved.key(), w.applied())
	}
	stream, err := e.js.Stream(e.ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := stream.GetLastMsgForSubject(e.ctx, events.UndoSubject()); err != nil || msg.Header.Get(events.HeaderUndoOf) != eventID {
		t.Errorf("the undo request's %s header: %v %v, want %s", events.HeaderUndoOf, msg, err, eventID)
	}

	refused := e.kvliveFails(time.Minute, "rollout", "undo", undoID, "--yes", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if !strings.Contains(refused, "an undo is not undone") || !strings.Contains(refused, eventID) {
		t.Errorf("undo of an undo said %q, want it refused naming %s", refused, eventID)
	}

	// A switch undone switches back.
	small := e.selectShapes(onInstancetype(itSmall))
	out = e.kvliveCommand(2*time.Minute, "switch", "--from", "clusterinstancetype/"+itSmall, "--to", "clusterinstancetype/"+itLarge, "-A", "--yes",
		"--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	sw := switched.FindStringSubmatch(out)
	if sw == nil {
		t.Fatalf("switch printed no id:\n%s", out)
	}
	e.follow(sw[1])
	out, stderr, err = e.kvliveOnce(2*time.Minute, "rollout", "undo", sw[1], "--yes", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if err != nil {
		t.Fatalf("rollout undo of the switch: %v\n%s", err, stderr.String())
	}
	m = undoRequested.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rollout undo of the switch printed no id:\n%s", out)
	}
	if p := e.follow(m[1]); p.Counts()[events.ResultSkip] != 0 || len(p.Outcomes) != len(small) {
		t.Errorf("undo of the switch: %v over %d VMs, want all %d moved back", p.Counts(), len(p.Outcomes), len(small))
	}
	e.waitSettled("every switched VM back on "+itSmall, small, func(v clusterView, s vmShape) string {
		if name := v.vms[s.key()].Spec.Instancetype.Name; name != itSmall {
			return "references " + name
		}
		return ""
	})
}
