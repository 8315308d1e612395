//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/events"
	"kvlive/integration/framework"
)

// TestOneShotCommandsFailFastAndSayWhy runs `kvlive plan` against an API
// server that refuses connections and as a user RBAC forbids to read VMs:
// each must fail at once (not after the caches' sync timeout) with what
// the user can act on, the URL or the verb and resource refused. `kvlive
// run` on a bus that replicas of another scope use fails the same way.
func TestOneShotCommandsFailFastAndSayWhy(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 2}})

	refusing := fmt.Sprintf("https://127.0.0.1:%d", freePort(t))
	stderr := e.kvliveFails(time.Minute, "plan", "clusterinstancetype/"+itMedium, "-A",
		"--kubeconfig", e.kubeconfig, "--server", refusing, "--insecure-skip-tls-verify")
	if !strings.Contains(stderr, "cannot reach the API server at "+refusing) {
		t.Errorf("kvlive plan against a refusing server said %q, want that it cannot reach %s", stderr, refusing)
	}

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nobody"}}
	if _, err := e.clients.Kube.CoreV1().ServiceAccounts(sa.Namespace).Create(e.ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stderr = e.kvliveFails(time.Minute, "plan", "clusterinstancetype/"+itMedium, "-A", "--kubeconfig", e.serviceAccountKubeconfig(sa))
	for _, want := range []string{"refuses to list virtualmachines.kubevirt.io in all namespaces", `cannot list resource "virtualmachines"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("kvlive plan as a user without RBAC said %q, want %q", stderr, want)
		}
	}

	// A replica of another scope on a bus in use is refused at start: it
	// would split the planner's and the applier's work with the first.
	team := namespaceName(0)
	e.runKvlive("replica scoped to "+team, "-n", team)
	e.waitFor("the first replica's scope on the bus", time.Minute, func() (bool, string) {
		c, err := e.js.Consumer(e.ctx, events.StreamEvents, events.ConsumerPlanner)
		if err != nil {
			return false, err.Error()
		}
		scope := c.CachedInfo().Config.Metadata[events.ScopeMetadata]
		return scope == team, "scope " + scope
	})
	args := append([]string{"run", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL}, e.natsArgs...)
	stderr = e.kvliveFails(time.Minute, append(args, "-n", "elsewhere")...)
	for _, want := range []string{"serves replicas scoped to namespace " + team + " (claimed by", "this one is scoped to namespace elsewhere"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("kvlive run of another scope said %q, want %q", stderr, want)
		}
	}
}

// TestTwoScopesStartedAtOnceOneRuns starts two `kvlive run` with different
// -n at once on a fresh nats-server, three times over: each time one runs
// and the other exits refused for its scope; kvlive scope names the
// winner's, and a switch for the loser's namespace sent to that bus is
// refused; once the winner stopped, kvlive scope --clear clears the claim
// and a replica of the loser's scope then starts.
func TestTwoScopesStartedAtOnceOneRuns(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 2}})
	for try := range 3 {
		url := framework.StartNATS(t).URL
		procs := map[string]*kvliveProc{}
		for _, scope := range []string{namespaceName(0), namespaceName(1)} {
			procs[scope] = e.runKvlive(fmt.Sprintf("try %d, -n %s", try, scope), "-n", scope, "--nats-url", url)
		}
		var loser, winner string
		e.waitFor("one of the two to be refused", time.Minute, func() (bool, string) {
			loser, winner = "", ""
			for scope, p := range procs {
				select {
				case <-p.exited:
					loser = scope
				default:
					winner = scope
				}
			}
			return loser != "" && winner != "", "not one refused and one running"
		})
		procs[loser].stopped.Store(true) // refused, as it should be
		if out := procs[loser].out.String(); !strings.Contains(out, "this one is scoped to namespace "+loser) {
			t.Errorf("try %d: the refused replica (-n %s) said:\n%s", try, loser, procs[loser].out.Tail(20))
		}
		if out := e.kvliveCommand(time.Minute, "scope", "--nats-url", url); !strings.Contains(out, "this bus serves namespace "+winner) {
			t.Errorf("try %d: kvlive scope said %q, want namespace %s", try, out, winner)
		}
		if try == 0 {
			// A switch for the loser's namespace, sent to the winner's
			// bus, is refused before it is sent: they would plan none of
			// its VMs and call it complete.
			stderr := e.kvliveFails(time.Minute, "switch", "--from", "clusterinstancetype/"+itMedium, "--to", "clusterinstancetype/"+itLarge,
				"-n", loser, "--yes", "--kubeconfig", e.kubeconfig, "--nats-url", url)
			if !strings.Contains(stderr, "do not serve that namespace: this bus serves namespace "+winner) {
				t.Errorf("a switch for namespace %s on the bus of %s said %q", loser, winner, stderr)
			}
		}
		procs[winner].terminate()
		e.waitFor("the winner's pulls to end", 2*time.Minute, func() (bool, string) {
			_, stderr, err := e.kvliveOnce(time.Minute, "scope", "--clear", "--nats-url", url)
			return err == nil, stderr.String()
		})
		started := e.runKvlive(fmt.Sprintf("try %d, -n %s after the clear", try, loser), "-n", loser, "--nats-url", url)
		e.waitFor("the loser's scope claimed", time.Minute, func() (bool, string) {
			out, _, _ := e.kvliveOnce(time.Minute, "scope", "--nats-url", url)
			return strings.Contains(out, "this bus serves namespace "+loser), out
		})
		e.checkProcs()
		started.terminate()
	}
}
