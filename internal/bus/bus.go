package bus

import (
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configure the in-process NATS server.
type EmbeddedOptions struct {
	// StoreDir is the JetStream file store directory.
	StoreDir string
	// Host and Port to listen on for other processes (kvlive switch, nats CLI).
	// Port -1 picks a free port; DontListen keeps the server in-process only.
	Host       string
	Port       int
	DontListen bool
	// Auth, when set, is who may connect and how (TLS); kvlive's own
	// connection then needs Auth.Self().
	Auth *ListenAuth
}

// StartEmbedded starts a JetStream-enabled NATS server in this process.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	opts := o.Auth.serverOptions()
	opts.ServerName, opts.JetStream, opts.StoreDir = "kvlive", true, o.StoreDir
	opts.Host, opts.Port, opts.DontListen = o.Host, o.Port, o.DontListen
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats: embedded server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats: embedded server not ready after 30s")
	}
	return ns, nil
}

// ConnectEmbedded connects to an embedded server in-process, bypassing the
// network (and TLS); extra logs in to a server with EmbeddedOptions.Auth.
func ConnectEmbedded(ns *server.Server, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	return Connect(name, log, "", append([]nats.Option{nats.InProcessServer(ns)}, extra...)...)
}

// ErrorCount counts the asynchronous errors (a slow consumer's dropped
// messages, a permissions violation) NATS reports to the connections that
// were given its Counted option, for a metric.
type ErrorCount struct{ n atomic.Int64 }

// Load is how many have been reported so far.
func (c *ErrorCount) Load() int64 { return c.n.Load() }

// Counted is a connection option that counts each asynchronous error in c
// and then hands it on to the handler set before it (Connect's, which logs
// it): pass it among Connect's extra options.
func (c *ErrorCount) Counted() nats.Option {
	return func(o *nats.Options) error {
		next := o.AsyncErrorCB
		o.AsyncErrorCB = func(nc *nats.Conn, sub *nats.Subscription, err error) {
			c.n.Add(1)
			if next != nil {
				next(nc, sub, err)
			}
		}
		return nil
	}
}

// Redact is a NATS server URL, or a comma-separated list of them, with
// every password or token in it replaced by "xxxxx", for logs and errors.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := neturl.Parse(strings.TrimSpace(p))
		if err != nil {
			if at := strings.LastIndex(p, "@"); at >= 0 {
				parts[i] = "xxxxx" + p[at:] // unparsable, but maybe credentials
			}
			continue
		}
		if u.User != nil {
			if _, hasPassword := u.User.Password(); !hasPassword {
				u.User = neturl.User("xxxxx") // a token alone
			}
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// redactErr is err with any credentials urls holds taken out of its text
// (a dial error may quote the URL), still wrapping err.
func redactErr(err error, urls string) error {
	if redacted := Redact(urls); redacted != urls && strings.Contains(err.Error(), urls) {
		return redactedError{err: err, text: strings.ReplaceAll(err.Error(), urls, redacted)}
	}
	return err
}

type redactedError struct {
	err  error
	text string
}

func (e redactedError) Error() string { return e.text }
func (e redactedError) Unwrap() error { return e.err }

// Connect connects to url with reconnects that never give up, so a NATS
// restart pauses kvlive instead of ending it.
func Connect(name string, log *slog.Logger, url string, extra ...nats.Option) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			// A slow consumer's dropped JetStream messages are unacked,
			// so the server delivers them again after the ack wait.
			log.Warn("nats asynchronous error", "subject", subject, "err", err)
		}),
	}, extra...)
	nc, err := nats.Connect(url, opts...)
	switch {
	case errors.Is(err, nats.ErrAuthorization), err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return nil, fmt.Errorf("nats: %s refused kvlive's credentials (check --nats-creds, --nats-nkey, --nats-user with its password, or the token): %w", Redact(url), redactErr(err, url))
	case err != nil:
		return nil, fmt.Errorf("nats: connect %s: %w", Redact(url), redactErr(err, url))
	}
	return nc, nil
}
