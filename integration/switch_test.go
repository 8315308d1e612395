//go:build integration

package integration

import (
	"regexp"
	"strconv"
	"testing"

	"kvlive/events"
)

// switchOutput is what `kvlive switch --wait` prints: the request's event
// id, then how many VMs have an outcome.
var switchOutput = regexp.MustCompile(`(?s)switch requested: (\S+)\n(\d+) VMs: `)

// TestSwitchMovesOnlySelectedVMs runs `kvlive switch --wait` as a user
// would, moving the tier=web VMs from one cluster instance type to another.
// Only the selected VMs may reference the new instance type (and the
// stand-in pins them to it); every other VM keeps its reference and pin.
func TestSwitchMovesOnlySelectedVMs(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 3, perIT: map[string]int{itMedium: 120}})
	e.runKvlive("all stages")
	e.waitGenerations()

	out := e.kvliveCommand(rolloutTimeout, "switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A",
		"--from", "clusterinstancetype/"+itMedium, "--to", "clusterinstancetype/"+itLarge, "-l", "tier=web", "--wait")
	m := switchOutput.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kvlive switch printed %q", out)
	}
	eventID := m[1]
	web := func(s vmShape) bool { return s.instancetype == itMedium && s.tier == "web" }
	selected, unselected := e.selectShapes(web), e.selectShapes(func(s vmShape) bool { return !web(s) })
	if n, _ := strconv.Atoi(m[2]); n != len(selected) {
		t.Errorf("kvlive switch --wait reported %d VMs, want %d", n, len(selected))
	}

	progress := e.follow(eventID)
	e.checkRollout(progress, rolloutWant{eventID: eventID, shapes: selected, action: vmShape.expected, clean: true})
	large, medium := e.instancetype(itLarge), e.instancetype(itMedium)
	e.waitSettled("selected VMs on "+itLarge+", pinned by the stand-in", selected, func(v clusterView, s vmShape) string {
		if p := pinProblem(v, s, large); p != "" {
			return p
		}
		return standinProblem(v, s, progress.Outcomes[e.uids[s.key()]].Result, large.Spec)
	})
	e.waitSettled("unselected VMs still on "+itMedium, unselected, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, medium)
	})
	e.checkWrites(selected, unselected)
	if progress.Counts()[events.ResultLive] == 0 {
		t.Errorf("no selected VM switched live: %v", progress.Counts())
	}
}
