//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOneShotCommandsFailFastAndSayWhy runs `kvlive plan` against an API
// server that refuses connections and as a user RBAC forbids to read VMs:
// each must fail at once (not after the caches' sync timeout) with what
// the user can act on, the URL or the verb and resource refused.
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
}
