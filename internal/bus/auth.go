package bus

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Auth is how kvlive proves who it is to a NATS server and secures the
// connection, with nats.go's own options. Secrets are read from files (or
// the environment, by the caller), never taken from flags that ps shows.
type Auth struct {
	// CredsFile is a .creds file: a user JWT and its NKey seed.
	CredsFile string
	// NKeyFile is a file holding a user NKey seed.
	NKeyFile string
	// User and Password authenticate by name; Token by a bearer token.
	User, Password string
	Token          string
	// CAFile verifies the server's certificate; CertFile and KeyFile are
	// a client certificate for servers that ask for one (mutual TLS).
	CAFile, CertFile, KeyFile string
}

// IsZero reports whether no authentication or TLS is configured.
func (a Auth) IsZero() bool { return a == Auth{} }

// Options turns a into nats.go options, after checking it is coherent.
func (a Auth) Options() ([]nats.Option, error) {
	var opts []nats.Option
	methods := 0
	if a.CredsFile != "" {
		methods++
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.NKeyFile != "" {
		methods++
		opt, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats: nkey seed %s: %w", a.NKeyFile, err)
		}
		opts = append(opts, opt)
	}
	if a.User != "" {
		methods++
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	} else if a.Password != "" {
		return nil, errors.New("nats: a password without a user")
	}
	if a.Token != "" {
		methods++
		opts = append(opts, nats.Token(a.Token))
	}
	if methods > 1 {
		return nil, errors.New("nats: name one way to authenticate: a creds file, an nkey seed, a user and password, or a token")
	}
	if (a.CertFile == "") != (a.KeyFile == "") {
		return nil, errors.New("nats: a client certificate and its key go together")
	}
	if a.CAFile != "" {
		opts = append(opts, nats.RootCAs(a.CAFile))
	}
	if a.CertFile != "" {
		opts = append(opts, nats.ClientCert(a.CertFile, a.KeyFile))
	}
	return opts, nil
}

// ReadSecret reads a secret from file (trailing newlines dropped), else
// from the environment variable env; "" when neither is set.
func ReadSecret(file, env string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("nats: secret: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
