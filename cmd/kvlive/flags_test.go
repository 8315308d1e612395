package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"kvlive/internal/bus"
)

// TestBadFlagsAndUnknownCommandsAreErrors: values that would run a broken
// pipeline, and subcommands that do not exist, are usage errors, not
// silently accepted or answered with a help page and exit status 0.
func TestBadFlagsAndUnknownCommandsAreErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--log-level", "verbose", "version"},
		{"run", "--workers", "-5"},
		{"run", "--planner-workers", "0"},
		{"run", "--rate", "-1"},
		{"run", "--listen-config", "nats.conf", "--nats-url", "nats://127.0.0.1:4222"},
		{"demo", "--running-percent", "150"},
		{"rollout", "stats", "x"},
		{"dlq", "shred"},
		{"run", "--batch-size", "0"},
		{"run", "--on-failure", "panic"},
		{"switch", "--from", "clusterinstancetype/a", "--to", "clusterinstancetype/b", "--pause", "soon"},
		{"outcomes", "--request-timeout", "soon"},
		{"run", "--max-age", "-1h"},
		{"rollout", "status", "x", "--request-timeout", "-3s"},
	} {
		out, err := kvlive(t, args...)
		if err == nil {
			t.Errorf("kvlive %s succeeded:\n%s", strings.Join(args, " "), out)
			continue
		}
		if !errors.Is(err, errUsage) && !strings.Contains(err.Error(), "want") {
			t.Errorf("kvlive %s: %v, want a usage error saying what is wanted", strings.Join(args, " "), err)
		}
	}
}

// TestPlanOfflineReadsStandardInput: -f - reads the objects from stdin.
func TestPlanOfflineReadsStandardInput(t *testing.T) {
	file, err := os.ReadFile(filepath.Join("..", "..", "planner", "offline", "testdata", "switch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	var out bytes.Buffer
	root.SetIn(bytes.NewReader(file))
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"plan", "--offline", "-f", "-", "--switch", "clusterinstancetype/n1.small", "--to", "clusterinstancetype/n1.medium"})
	if err := root.ExecuteContext(t.Context()); err != nil || !strings.Contains(out.String(), "api-3") {
		t.Fatalf("plan --offline -f -: %v\n%s", err, out.String())
	}
}

// TestEveryOutputFlagTakesTheSameFormats: -o means one thing everywhere,
// table, wide, json or yaml (version, which has no columns, no wide).
func TestEveryOutputFlagTakesTheSameFormats(t *testing.T) {
	var walk func(*cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		o := c.Flags().Lookup("output")
		if o == nil {
			return
		}
		seen++
		want := []string{"table", "wide", "json", "yaml"}
		if c.Name() == "version" {
			want = []string{"table", "json", "yaml"}
		}
		for _, f := range want {
			if err := o.Value.Set(f); err != nil {
				t.Errorf("%s -o %s: %v", c.CommandPath(), f, err)
			}
		}
		if err := o.Value.Set("waterfall"); err == nil {
			t.Errorf("%s -o waterfall: accepted", c.CommandPath())
		}
	}
	walk(newRoot())
	if seen < 10 {
		t.Errorf("%d commands have -o, want every listing command's (10)", seen)
	}
}

// TestListenersDefaultToLoopback: what kvlive run serves (metrics and
// health, the embedded NATS server) listens on loopback unless told
// otherwise.
func TestListenersDefaultToLoopback(t *testing.T) {
	run, _, err := newRoot().Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"metrics-addr", "listen"} {
		if def := run.Flags().Lookup(name).DefValue; !strings.HasPrefix(def, "127.0.0.1:") {
			t.Errorf("--%s defaults to %q, want a loopback address", name, def)
		}
	}
}

// TestEmbeddedNATSRefusesToListenBeyondLoopback: without a listen
// configuration that says who may connect, kvlive run will not expose its
// embedded server; and credentials meant for --nats-url are refused rather
// than silently unused.
func TestEmbeddedNATSRefusesToListenBeyondLoopback(t *testing.T) {
	noAuth := filepath.Join(t.TempDir(), "tls-only.conf")
	if err := os.WriteFile(noAuth, []byte("# who may connect: nobody said\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*runOptions{
		{listen: "0.0.0.0:4222", dataDir: t.TempDir()},
		{listen: "192.0.2.7:4222", dataDir: t.TempDir()},
		{listen: "0.0.0.0:4222", dataDir: t.TempDir(), listenConfig: noAuth},
		{listen: "127.0.0.1:0", dataDir: t.TempDir(), nats: natsFlags{auth: natsAuthFlags{Auth: bus.Auth{User: "kvlive"}}}},
	} {
		_, _, closeAll, err := o.connect(nil, &bus.ErrorCount{})
		if err == nil {
			_ = closeAll()
			t.Errorf("--listen %s with %+v: started", o.listen, o.nats.auth.Auth)
			continue
		}
		if !errors.Is(err, errUsage) {
			t.Errorf("--listen %s: %v, want a usage error", o.listen, err)
		}
	}
}

// TestNATSAuthFlags: one way to authenticate, secrets from files or the
// environment, a certificate with its key.
func TestNATSAuthFlags(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "password")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := natsAuthFlags{Auth: bus.Auth{User: "kvlive"}, passwordFile: secret}
	if _, err := a.options(); err != nil {
		t.Errorf("user with a password file: %v", err)
	}
	t.Setenv(envNATSToken, "tok")
	for _, bad := range []natsAuthFlags{
		{Auth: bus.Auth{User: "kvlive"}},                           // the token from the environment too: two ways
		{passwordFile: secret},                                     // a password without a user
		{Auth: bus.Auth{CertFile: "cert.pem"}},                     // a certificate without its key
		{Auth: bus.Auth{CredsFile: "a.creds", NKeyFile: "a.nk"}},   // two ways
		{Auth: bus.Auth{User: "kvlive"}, passwordFile: dir + "/x"}, // an unreadable secret
	} {
		if _, err := bad.options(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}

// TestRequestTimeoutBoundsStoreReads: --request-timeout, kubectl's flag, is
// how long a read of the store rides out a NATS leader election, in
// kubectl's format, 0 meaning bus.ReadBound; commands with kubeconfig
// flags share the one flag.
func TestRequestTimeoutBoundsStoreReads(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"0", bus.ReadBound}, {"5", 5 * time.Second}, {"2m", 2 * time.Minute}, {"1.5s", 1500 * time.Millisecond},
	} {
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		var s storeFlags
		s.bind(cmd)
		cmd.SetArgs([]string{"--request-timeout", tc.value})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("--request-timeout %s: %v", tc.value, err)
		}
		if s.bound != tc.want {
			t.Errorf("--request-timeout %s: bound %v, want %v", tc.value, s.bound, tc.want)
		}
	}
	root := newRoot()
	for _, path := range [][]string{{"outcomes"}, {"events"}, {"trace"}, {"rollout", "status"}, {"rollout", "retry"}, {"replay"}, {"dlq", "list"}, {"switch"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Flags().Lookup("request-timeout") == nil {
			t.Errorf("kvlive %s has no --request-timeout", strings.Join(path, " "))
		}
	}
}
