//go:build integration

package integration

import (
	"testing"
	"time"

	"kvlive/events"
)

// TestEditRollsOutToEveryVM edits a cluster instance type that 500 VMs in
// 5 namespaces reference, running and stopped, and checks the rollout VM by
// VM: one outcome each, equal to its plan and to what the fleet's shape
// dictates; every VM pinned to the new generation the way KubeVirt pins;
// one write per VM, a stopped VM's testing the resourceVersion it was read
// at; and the stand-in, playing virt-controller, agreeing
// with each result on the VM and its VMI. VMs on another instance type are
// never touched.
func TestEditRollsOutToEveryVM(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 5, perIT: map[string]int{itMedium: 500, itSmall: 20}})
	e.runKvlive("all stages")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	progress := e.follow(eventID)

	edited, others := e.selectShapes(onInstancetype(itMedium)), e.selectShapes(onInstancetype(itSmall))
	e.checkRollout(progress, rolloutWant{
		eventID:  eventID,
		shapes:   edited,
		action:   vmShape.expected,
		revision: revisionOf(it),
		clean:    true,
	})
	e.waitSettled("every edited VM pinned to the new generation, as the stand-in sees it", edited, func(v clusterView, s vmShape) string {
		if p := pinProblem(v, s, it); p != "" {
			return p
		}
		return standinProblem(v, s, progress.Outcomes[e.uids[s.key()]].Result, it.Spec)
	})
	small := e.instancetype(itSmall)
	e.waitSettled("VMs on another instance type still on their pin", others, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, small)
	})
	e.checkWrites(edited, others)
	if counts := progress.Counts(); counts[events.ResultLive] == 0 || counts[events.ResultRestart] == 0 || counts[events.ResultNextBoot] == 0 {
		t.Errorf("the fleet should exercise live, restart and next-boot; got %v", counts)
	}
	var nextBoot []string
	for _, o := range progress.Outcomes {
		if o.Result == events.ResultNextBoot {
			nextBoot = append(nextBoot, o.VM.Namespace+"/"+o.VM.Name)
		}
	}
	e.checkNextBootWritesAsRead(nextBoot)
	e.checkVerdicts(eventID, 3*time.Minute)
}
