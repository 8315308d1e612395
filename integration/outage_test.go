//go:build integration

package integration

import (
	"testing"
	"time"
)

// An edit made while NATS is away for minutes: the one test that needs a
// long wall-clock wait (the outage itself), in a file of its own so that
// integration/AREAS can put it beside other tests that mostly wait.

// watcherOldGiveUp is about how long the watcher used to retry a change
// before it gave up until restart: 15 attempts with client-go's default
// controller backoff (5ms doubling, about 164s in all) plus each attempt's
// publish timeout while NATS is away.
const watcherOldGiveUp = 4 * time.Minute

// TestEditDuringALongNATSOutage edits an instance type while NATS is down
// for longer than the watcher used to keep trying: the edit is published
// once NATS is back and rolled out.
func TestEditDuringALongNATSOutage(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 6}})
	e.runKvlive("all stages")
	e.waitGenerations()
	e.nats.Stop()
	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	time.Sleep(watcherOldGiveUp + 15*time.Second) // the outage itself; nothing is measured against it
	e.nats.Start()
	e.checkRecovered(it, eventID, e.follow(eventID))
}
