package bus

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func writeConf(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "listen.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestListenConfigTakesOnlyAuthorizationAndTLS: a listen configuration
// with more than who may connect and how, or with no authorization, is
// refused with what is wrong; variables its users' permissions use are fine.
func TestListenConfigTakesOnlyAuthorizationAndTLS(t *testing.T) {
	for _, c := range []struct{ conf, err string }{
		{"jetstream { store_dir: /tmp/x }\nauthorization { token: abc }", `"jetstream" is not for the embedded server`},
		{"listen: 0.0.0.0:4222\nauthorization { token: abc }", `"listen" is not for the embedded server`},
		{"tls { cert_file: a, key_file: b }", "no such file"},
		{"# nothing", "sets no authorization"},
		{"UNUSED = { publish: { deny: \">\" } }\nauthorization { token: abc }", `"UNUSED" is not for the embedded server`},
		{`authorization { token: "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG" }`, "bcrypt-hashed token"},
		{`authorization { users: [{user: kvlive-embedded, password: x}] }`, "kvlive's own"},
		{"READER = { publish: { deny: \">\" } }\nauthorization { users: [{user: r, password: p, permissions: $READER}] }", ""},
		{"authorization { token: abc }", ""},
		{"authorization { users: [{user: a, password: x}, {user: b}] }", `the user "b" has no password`},
		{"authorization { user: a }", `the user "a" has no password`},
	} {
		_, err := LoadListenAuth(writeConf(t, c.conf))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.conf, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want an error saying %q", c.conf, err, c.err)
		}
	}
}

// TestEmbeddedServerWithAuthorization: clients over the network need the
// configuration's credentials and get its permissions; kvlive's own
// in-process connection gets in and uses JetStream.
func TestEmbeddedServerWithAuthorization(t *testing.T) {
	for _, c := range []struct{ name, conf string }{
		{"users", `authorization { users: [
			{user: reader, password: r, permissions: {publish: {deny: ">"}}}
			{user: admin, password: a}
		] }`},
		{"token", `authorization { token: tok }`},
	} {
		t.Run(c.name, func(t *testing.T) {
			auth, err := LoadListenAuth(writeConf(t, c.conf))
			if err != nil {
				t.Fatal(err)
			}
			ns, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, Auth: auth})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
			if nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(0)); err == nil {
				nc.Close()
				t.Fatal("a client without credentials got in")
			}
			self, err := ConnectEmbedded(ns, "kvlive", nil, auth.Self()...)
			if err != nil {
				t.Fatalf("kvlive's own connection: %v", err)
			}
			defer self.Close()
			js, err := jetstream.New(self)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.AccountInfo(context.Background()); err != nil {
				t.Fatalf("kvlive's own connection has no JetStream: %v", err)
			}
			if c.name != "users" {
				return
			}
			for user, allowed := range map[string]bool{"admin": true, "reader": false} {
				nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, user[:1]))
				if err != nil {
					t.Fatalf("%s: %v", user, err)
				}
				_, err = nc.Request("$JS.API.INFO", nil, 2*time.Second)
				nc.Close()
				if allowed != (err == nil) {
					t.Errorf("%s's JetStream API request: %v; want allowed %v", user, err, allowed)
				}
			}
		})
	}
}

// TestListenConfigWithSomeOfKvlivesRoles: a listen configuration that
// includes deploy/nats/kvlive-permissions.conf and gives users only some
// of its roles loads (nats-server alone refuses the roles nothing
// references: issue 59, item 11), and a variable of another name that
// nothing uses is still refused.
func TestListenConfigWithSomeOfKvlivesRoles(t *testing.T) {
	roles, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats", "kvlive-permissions.conf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kvlive-permissions.conf"), roles, 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(text string) string {
		path := filepath.Join(dir, "listen.conf")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	auth, err := LoadListenAuth(write("include ./kvlive-permissions.conf\nauthorization { users: [{user: r, password: p, permissions: $KVLIVE_READER}] }"))
	if err != nil {
		t.Fatalf("a reader alone of kvlive's roles: %v", err)
	}
	if users := auth.opts.Users; len(users) != 2 || users[0].Username != "r" || users[0].Permissions == nil {
		t.Errorf("users %+v; want r with the reader's permissions, and kvlive's own", users)
	}
	if _, err := LoadListenAuth(write("include ./kvlive-permissions.conf\nUNUSED = { publish: { deny: \">\" } }\nauthorization { token: abc }")); err == nil || !strings.Contains(err.Error(), `"UNUSED" is not for the embedded server`) {
		t.Errorf("an unused variable not of kvlive's roles: %v", err)
	}
}
