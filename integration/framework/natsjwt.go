package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// StartOperatorNATS starts a single nats-server like StartNATS in operator
// mode, NATS's decentralised JWT authentication as nsc sets it up: an
// operator signs an account with JetStream enabled, the account signs a
// user. It returns the server and a credentials file (the user's JWT and
// NKey seed) that lets one in; CredsOfAnotherAccount writes one the server
// refuses.
func StartOperatorNATS(t testing.TB) (*NATSServer, string) {
	t.Helper()
	operator := newKeys(t, nkeys.CreateOperator)
	account := newKeys(t, nkeys.CreateAccount)
	system := newKeys(t, nkeys.CreateAccount) // JetStream needs one

	oc := jwt.NewOperatorClaims(operator.public)
	oc.Name = "kvlive-test"
	operatorJWT := encode(t, oc, operator.pair)

	ac := jwt.NewAccountClaims(account.public)
	ac.Name = "KVLIVE"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit}
	accountJWT := encode(t, ac, operator.pair)
	sc := jwt.NewAccountClaims(system.public)
	sc.Name = "SYS"
	systemJWT := encode(t, sc, operator.pair)

	node := singleNode(t)
	node.raw = fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n  %s: %q\n}\n",
		operatorJWT, system.public, account.public, accountJWT, system.public, systemJWT)
	s := startSingle(t, node)
	return s, writeCreds(t, account.pair, "kvlive")
}

// CredsOfAnotherAccount writes a credentials file for a user of an account
// no server of the test's operator knows.
func CredsOfAnotherAccount(t testing.TB) string {
	t.Helper()
	return writeCreds(t, newKeys(t, nkeys.CreateAccount).pair, "stranger")
}

type keys struct {
	pair   nkeys.KeyPair
	public string
}

func newKeys(t testing.TB, create func() (nkeys.KeyPair, error)) keys {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatalf("framework: nkeys: %v", err)
	}
	public, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("framework: nkeys: %v", err)
	}
	return keys{kp, public}
}

func encode(t testing.TB, c jwt.Claims, signer nkeys.KeyPair) string {
	t.Helper()
	s, err := c.Encode(signer)
	if err != nil {
		t.Fatalf("framework: jwt: %v", err)
	}
	return s
}

// writeCreds writes a creds file for a new user signed by account.
func writeCreds(t testing.TB, account nkeys.KeyPair, name string) string {
	t.Helper()
	user := newKeys(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(user.public)
	uc.Name = name
	userJWT := encode(t, uc, account)
	seed, err := user.pair.Seed()
	if err != nil {
		t.Fatalf("framework: nkeys: %v", err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatalf("framework: creds: %v", err)
	}
	path := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatalf("framework: creds: %v", err)
	}
	return path
}
