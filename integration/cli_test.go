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
	if want := "serves replicas scoped to namespace " + team + ", this one is scoped to namespace elsewhere"; !strings.Contains(stderr, want) {
		t.Errorf("kvlive run of another scope said %q, want %q", stderr, want)
	}
}
