package main

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"kvlive/internal/bus"
)

// Environment variables that hold NATS secrets, for what ps must not show.
const (
	envNATSPassword = "KVLIVE_NATS_PASSWORD"
	envNATSToken    = "KVLIVE_NATS_TOKEN"
)

// natsAuthFlags say how a command authenticates to NATS and secures the
// connection: nats.go's own mechanisms, secrets from files or the
// environment only.
type natsAuthFlags struct {
	bus.Auth
	passwordFile, tokenFile string
}

func (a *natsAuthFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&a.CredsFile, "nats-creds", "", "NATS credentials file (user JWT and NKey seed)")
	f.StringVar(&a.NKeyFile, "nats-nkey", "", "file holding a NATS user NKey seed")
	f.StringVar(&a.User, "nats-user", "", "NATS user; its password from --nats-password-file or $"+envNATSPassword)
	f.StringVar(&a.passwordFile, "nats-password-file", "", "file holding the NATS user's password")
	f.StringVar(&a.tokenFile, "nats-token-file", "", "file holding a NATS token (or $"+envNATSToken+")")
	f.StringVar(&a.CAFile, "nats-ca", "", "CA certificate that signed the NATS server's (TLS)")
	f.StringVar(&a.CertFile, "nats-cert", "", "client certificate for NATS servers that verify clients (with --nats-key)")
	f.StringVar(&a.KeyFile, "nats-key", "", "the client certificate's key")
}

// options reads the secrets and returns the nats.go options; mistakes are
// usage errors.
func (a *natsAuthFlags) options() ([]nats.Option, error) {
	auth := a.Auth
	var err error
	if auth.User != "" {
		if auth.Password, err = bus.ReadSecret(a.passwordFile, envNATSPassword); err != nil {
			return nil, err
		}
	} else if a.passwordFile != "" {
		return nil, fmt.Errorf("%w: --nats-password-file without --nats-user", errUsage)
	}
	if auth.Token, err = bus.ReadSecret(a.tokenFile, envNATSToken); err != nil {
		return nil, err
	}
	opts, err := auth.Options()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return opts, nil
}
