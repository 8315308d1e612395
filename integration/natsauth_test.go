//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// TestKvliveOnASecuredNATS runs kvlive against a nats-server that requires
// TLS and a user: kvlive run rolls an edit out and the read commands see
// it, with the CA and the user's password from a file, or an NKey seed. A wrong password
// and a missing CA fail at once, saying why, for run and the CLI alike.
func TestKvliveOnASecuredNATS(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	public, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 10}, secureNATS: true, natsNKeys: []string{public}})
	e.runKvlive("all stages")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})
	out := e.kvliveCommand(time.Minute, append([]string{"rollout", "status", eventID, "--nats-url", e.nats.URL}, e.natsArgs...)...)
	if !strings.Contains(out, "complete") {
		t.Errorf("rollout status over TLS as kvlive:\n%s", out)
	}
	out = e.kvliveCommand(time.Minute, "events", "--nats-url", e.nats.URL, "--nats-ca", e.nats.CAFile, "--nats-nkey", seedFile)
	if !strings.Contains(out, eventID) {
		t.Errorf("kvlive events as an NKey user:\n%s", out)
	}

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	badPassword := []string{"--nats-ca", e.nats.CAFile, "--nats-user", "kvlive", "--nats-password-file", wrong}
	for _, args := range [][]string{
		append([]string{"events", "--nats-url", e.nats.URL}, badPassword...),
		append([]string{"run", "--kubeconfig", e.kubeconfig, "--metrics-addr", "", "--nats-url", e.nats.URL}, badPassword...),
	} {
		if stderr := e.kvliveFails(time.Minute, args...); !strings.Contains(stderr, "refused kvlive's credentials") {
			t.Errorf("kvlive %s with a wrong password said %q", args[0], stderr)
		}
	}
	stderr := e.kvliveFails(time.Minute, "events", "--nats-url", e.nats.URL, "--nats-user", "kvlive", "--nats-password-file", wrong)
	if !strings.Contains(stderr, "certificate") && !strings.Contains(stderr, "tls") && !strings.Contains(stderr, "TLS") {
		t.Errorf("kvlive events without the CA said %q, want a TLS error", stderr)
	}
}
