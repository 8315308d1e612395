//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"

	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// TestRealKubeVirtAVerdictIsTheAnswerToItsMove runs issue 63's sequence on
// KubeVirt v1.9.0's own virt-controller, migrations played, round after
// round on several VMs at once: an instance type raised past the VMs'
// maxSockets (KubeVirt sets RestartRequired), its memory raised (the
// condition stays), then edited back to sockets the VMs can run, which
// kvlive predicts live and moves at once. The last move lands while the
// earlier change's RestartRequired still stands, often in the same second
// as its transition time; its verdict must be KubeVirt's answer to that
// move (the hot-plug carried by a migration: live), never the condition
// left from before. The test counts the moves that met the old condition,
// so a run where the race was never reached fails rather than passes by
// luck.
func TestRealKubeVirtAVerdictIsTheAnswerToItsMove(t *testing.T) {
	e := newKubeVirtEnv(t)
	e.createInstancetype("u1.flip", 2, "2Gi")
	var fleet []kvVM
	for i := range 5 {
		fleet = append(fleet, kvVM{name: fmt.Sprintf("flip-%d", i), running: true})
	}
	e.createVMs("u1.flip", fleet...)
	e.runKvlive("all stages", "--observe-timeout", "45s")
	e.waitWatched(1)

	met, moves := 0, 0
	// The VMIs boot with 2 sockets (maxSockets 8) and 2Gi (maxGuest 8Gi):
	// each round goes past 8 sockets, raises the memory by 1Gi, and comes
	// back to sockets the VMs can hot-plug.
	memory := 2
	for round, sockets := range []uint32{4, 6, 8} {
		e.follow(e.editInstancetypeTo("u1.flip", 10, fmt.Sprintf("%dGi", memory)))
		e.waitRestartRequired(fleet, "CPU sockets updated in template spec to a value higher than what's available")
		memory++
		e.follow(e.editInstancetypeTo("u1.flip", 10, fmt.Sprintf("%dGi", memory)))
		e.waitRestartRequired(fleet, "")
		eventID := e.editInstancetypeTo("u1.flip", sockets, fmt.Sprintf("%dGi", memory))
		p := e.follow(eventID)
		want := map[string]verdictWant{}
		for _, v := range fleet {
			out := p.Outcomes[e.uids[kvNamespace+"/"+v.name]]
			if out.Result != events.ResultLive || !out.Wrote {
				t.Fatalf("round %d, %s: %s (%s), want a live move", round, v.name, out.Result, out.Reason)
			}
			moves++
			if out.AtMove != nil {
				if _, ok := out.AtMove.Condition(string(virtv1.VirtualMachineRestartRequired)); ok {
					met++
				}
			}
			want[v.name] = verdictWant{events.ObservedLive, "migration", nil}
		}
		e.checkVerdictsAre(eventID, want)
		e.checkAgainstKubeVirt(p, names(fleet))
	}
	t.Logf("%d of %d live moves landed on the earlier change's RestartRequired", met, moves)
	if met == 0 {
		t.Errorf("none of %d live moves met the earlier change's RestartRequired: the race this test is for was not run", moves)
	}
}

// waitRestartRequired waits until virt-controller has set RestartRequired
// on every VM of fleet, its message carrying says.
func (e *kvEnv) waitRestartRequired(fleet []kvVM, says string) {
	e.t.Helper()
	e.waitFor("virt-controller to set RestartRequired on every VM", kvTimeout, func() (bool, string) {
		v := e.view()
		var waiting []string
		for _, want := range fleet {
			if msg := restartMessage(v.vms[kvNamespace+"/"+want.name]); msg == "no condition" || !strings.Contains(msg, says) {
				waiting = append(waiting, want.name+": "+msg)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, ", ")
	})
}

// names are the fleet's VM names.
func names(fleet []kvVM) []string {
	out := make([]string, len(fleet))
	for i, v := range fleet {
		out[i] = v.name
	}
	return out
}
