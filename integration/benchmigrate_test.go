//go:build integration && bench

package integration

import (
	"flag"
	"fmt"
	"time"

	"testing"

	"kvlive/events"
	"kvlive/internal/standin"
	"kvlive/rollout"
)

// The migrations section sizes.
var (
	benchMigrationVMs      = flag.Int("bench.migration-vms", 1000, "running VMs the live rollout through the stand-in's migrations moves (migrations section)")
	benchMigrationDuration = flag.Duration("bench.migration-duration", 2*time.Second, "how long each of the stand-in's live migrations takes (migrations section)")
)

// kubevirtParallelMigrations is KubeVirt's parallelMigrationsPerCluster
// by default, which the stand-in keeps to and kvlive's budget defaults to.
const kubevirtParallelMigrations = 5

// benchMigrations rolls a CPU hot-plug out to a fleet of running,
// live-migratable VMs through the stand-in's migration queue (KubeVirt's
// default limits, each migration taking a fixed D) with kvlive run at its
// defaults: the rollout's time against the floor N×D/5, the most VMs
// kvlive had moved whose migration had not ended (audit log to the
// stand-in's migration ends), and, with the 10th migration of a second
// rollout failing, how many VMs that rollout had committed once paused.
func benchMigrations(t *testing.T, tab *benchTable) {
	n, d := *benchMigrationVMs, *benchMigrationDuration
	const section = "migrations"
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: n}, live: true, migration: d})
	e.runKvlive("kvlive at its defaults")
	e.waitGenerations()
	inFleet := map[string]bool{}
	for _, s := range e.shapes {
		inFleet[s.key()] = true
	}
	counted := func(vm string) bool { return inFleet[vm] }
	floor := time.Duration(n) * d / kubevirtParallelMigrations

	began := time.Now()
	_, eventID := e.editInstancetype(itMedium, 3, "4Gi")
	e.waitFor(fmt.Sprintf("%d migrations to carry the hot-plug", n), 3*floor+5*time.Minute, func() (bool, string) {
		s := e.standin.Migrations()
		return s.Succeeded >= n, fmt.Sprintf("%d of %d migrations succeeded (%d started, %d failed)", s.Succeeded, n, s.Started, s.Failed)
	})
	var lastEnd time.Time
	history := e.standin.History()
	for _, m := range history {
		if m.Ended.After(lastEnd) {
			lastEnd = m.Ended
		}
	}
	took := lastEnd.Sub(began)
	e.follow(eventID)
	e.checkVerdicts(eventID, 5*time.Minute)
	settled := time.Since(began)
	committed, _ := movesToTheirMigrations(t, e.pinWrites(), standinRan(history), counted)
	ratio := took.Seconds() / floor.Seconds()
	tab.aim(section, fmt.Sprintf("a live rollout of %d running VMs, migrations of %v each, from the edit to the last migration's end", n, d),
		fmt.Sprintf("%v (%.2f× the floor %v = %d × %v / %d)", took.Round(100*time.Millisecond), ratio, floor, n, d, kubevirtParallelMigrations),
		"≤ 1.1× the floor", ratio <= 1.1)
	tab.add(section, "the same rollout, from the edit to KubeVirt's verdict on every VM (all live)", settled.Round(100*time.Millisecond).String(), "verdicts come due as each VM's migration ends")
	most := maxOverlap(committed)
	tab.aim(section, "the most VMs kvlive had moved whose migration had not ended (audit log to the migration's end)",
		fmt.Sprintf("%d of %d moves", most, len(committed)), fmt.Sprintf("≤ the budget (%d)", kubevirtParallelMigrations), most <= kubevirtParallelMigrations && len(committed) == n)

	// A bad change: the 10th migration of the next rollout fails, which
	// pauses it; what it committed is what moved by then.
	before := len(e.pinWrites())
	e.standin.FailMigration(10)
	_, failing := e.editInstancetype(itMedium, 4, "4Gi")
	store, err := rollout.Open(e.ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("the failed migration to pause the rollout", floor+5*time.Minute, func() (bool, string) {
		c, _, err := store.Get(e.ctx, failing)
		if err != nil {
			return false, err.Error()
		}
		return c.State == events.StatePaused, string(c.State)
	})
	paused := len(e.pinWrites()) - before
	time.Sleep(5 * time.Second) // a move the pause missed would show by now
	after := len(e.pinWrites()) - before
	tab.aim(section, "the 10th migration failing: VMs moved when its rollout paused (5 s later)",
		fmt.Sprintf("%d (%d)", paused, after), fmt.Sprintf("≤ 9 migrated before it + the budget's %d", kubevirtParallelMigrations), after <= 9+kubevirtParallelMigrations)
}

// standinRan are the migrations the stand-in ended.
func standinRan(ms []standin.MigrationRecord) []ranMigration {
	out := make([]ranMigration, 0, len(ms))
	for _, m := range ms {
		out = append(out, ranMigration{vm: m.VMI, name: m.UID, started: m.Started, ended: m.Ended, failed: m.Failed})
	}
	return out
}
