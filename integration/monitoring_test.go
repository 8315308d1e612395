//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"kvlive/integration/framework"
)

// metricName finds kvlive's metric names in rules and dashboards.
var metricName = regexp.MustCompile(`\bkvlive_[a-z0-9_]+`)

// TestMonitoringReadsMetricsKvliveExports scrapes `kvlive run` after a
// rollout (every stage, verdicts on) and checks that every metric name
// deploy/monitoring's alerts and dashboard read is one it exports: a rule
// on a name nobody exports never fires, and a panel on one stays empty.
func TestMonitoringReadsMetricsKvliveExports(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 4}})
	p := e.runKvlive("first", "--observe-timeout", "5s")
	e.waitGenerations()
	_, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	e.follow(eventID)
	e.checkVerdicts(eventID, time.Minute)

	used := map[string][]string{}
	for _, f := range []string{"prometheusrule.yaml", "kvlive-dashboard.json"} {
		raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(t), "deploy", "monitoring", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range metricName.FindAllString(string(raw), -1) {
			if !slices.Contains(used[name], f) {
				used[name] = append(used[name], f)
			}
		}
	}
	if len(used) < 10 {
		t.Fatalf("deploy/monitoring reads %d kvlive metrics; the test's pattern finds too few to be right: %v", len(used), used)
	}
	var scrape string
	e.waitFor("kvlive to export every metric deploy/monitoring reads", time.Minute, func() (bool, string) {
		scrape = e.metricsOf(p)
		var missing []string
		for name, files := range used {
			if !exported(scrape, name) {
				missing = append(missing, name+" ("+strings.Join(files, ", ")+")")
			}
		}
		slices.Sort(missing)
		return len(missing) == 0, "not exported: " + strings.Join(missing, "; ")
	})
}

// exported reports whether a scrape has a sample of name (a histogram's
// _bucket, _sum and _count are samples of their own name).
func exported(scrape, name string) bool {
	for _, line := range strings.Split(scrape, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			return true
		}
	}
	return false
}

// TestKeeperCountsTheRolloutsItSettles: kvlive run's records keeper tells
// how many rollouts it has not marked settled (kvlive_rollouts_open) and
// how many it marked (kvlive_rollouts_settled_total): an edit's rollout,
// its outcomes and verdicts stored, is marked once it has been quiet for a
// sweep period, and logged as settled.
func TestKeeperCountsTheRolloutsItSettles(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 4}})
	p := e.runKvlive("first", "--observe-timeout", "5s", "--max-age", "40s") // sweeps every 10 s
	e.waitGenerations()
	_, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	e.follow(eventID)
	e.checkVerdicts(eventID, time.Minute)
	e.waitFor("the keeper to mark the edit's rollout settled", time.Minute, func() (bool, string) {
		m := e.metricsOf(p)
		return strings.Contains(m, "\nkvlive_rollouts_settled_total 1\n") && strings.Contains(m, "\nkvlive_rollouts_open 0\n") &&
				loggedSettled(p, eventID),
			metricLines(m, "kvlive_rollouts_settled_total") + "; " + metricLines(m, "kvlive_rollouts_open")
	})
}

// loggedSettled reports whether kvlive run p's keeper logged eventID's
// rollout marked settled.
func loggedSettled(p *kvliveProc, eventID string) bool {
	return strings.Contains(p.out.String(), `msg="rollout settled: plans of it no longer move VMs" event=`+eventID)
}
