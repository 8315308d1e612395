//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOneWatcherLeadsAndAnotherTakesOver runs two kvlive replicas with
// --leader-elect: only the Lease holder runs the watcher (the other says
// who leads), an edit is rolled out once; after `kill -9` of the holder the
// other replica takes the Lease over once it lapses, and its watcher rolls
// the next edit out.
func TestOneWatcherLeadsAndAnotherTakesOver(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 30, itSmall: 30}})
	leaderFlags := func(id string) []string {
		// client-go's customary timings (15s, 10s, 2s): a busy shared machine
		// must not cost replica a the Lease while it is expected to hold it.
		return []string{"--leader-elect", "--leader-elect-id", id, "--leader-elect-resource-namespace", "default"}
	}
	holder := func() string {
		l, err := e.clients.Kube.CoordinationV1().Leases("default").Get(e.ctx, "kvlive-watcher", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	a := e.runKvlive("replica a", leaderFlags("replica-a")...)
	e.waitFor("replica a to hold the Lease", time.Minute, func() (bool, string) { return holder() == "replica-a", "holder " + holder() })
	b := e.runKvlive("replica b", leaderFlags("replica-b")...)
	e.waitFor("replica b to see who leads", time.Minute, func() (bool, string) {
		return strings.Contains(b.out.String(), `leader=replica-a`), "not yet"
	})
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	medium := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: medium, action: vmShape.expected, revision: revisionOf(it), clean: true})
	if strings.Contains(b.out.String(), "leading: the watcher starts") || holder() != "replica-a" {
		t.Fatalf("replica b ran the watcher while a held the Lease (holder %q)", holder())
	}

	a.kill()
	e.waitFor("replica b to take the Lease over", time.Minute, func() (bool, string) {
		return holder() == "replica-b" && strings.Contains(b.out.String(), "leading: the watcher starts"), "holder " + holder()
	})
	small, smallEvent := e.editInstancetype(itSmall, 2, "3Gi")
	smalls := e.selectShapes(onInstancetype(itSmall))
	e.checkRollout(e.follow(smallEvent), rolloutWant{eventID: smallEvent, shapes: smalls, action: vmShape.expected, revision: revisionOf(small), clean: true})
	e.checkWrites(append(medium, smalls...), nil)
	if n := len(e.streamBodies("KVLIVE_EVENTS")); n != 2 {
		t.Errorf("%s in the events stream, want 2", fmt.Sprint(n))
	}
}
