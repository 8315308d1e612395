package bus

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// embeddedUser is the user kvlive's own in-process connection logs in as
// when the embedded server requires users.
const embeddedUser = "kvlive-embedded"

// listenKeys are the only configuration blocks the embedded server takes
// from a listen configuration; the rest is kvlive's (JetStream, the store,
// the address from --listen).
var listenKeys = []string{"authorization", "tls"}

// kvliveRole is the name of a role deploy/nats/kvlive-permissions.conf
// defines (KVLIVE_WATCHER, KVLIVE_READER, …).
var kvliveRole = regexp.MustCompile(`^KVLIVE_[A-Z_]+$`)

// processConfig reads path as nats-server does. With unusedRoles (the
// file defines kvlive roles no user has, and nothing else it does not
// use, as LoadListenAuth checked), nats-server is told to let unknown
// top-level fields be for that one read: its switch is process-wide, so
// reads take turns.
func processConfig(path string, unusedRoles bool) (*server.Options, error) {
	if !unusedRoles {
		return server.ProcessConfigFile(path)
	}
	configRead.Lock()
	defer configRead.Unlock()
	server.NoErrOnUnknownFields(true)
	defer server.NoErrOnUnknownFields(false)
	return server.ProcessConfigFile(path)
}

var configRead sync.Mutex

// ListenAuth is how the embedded server lets in the processes that reach
// it over the network: the authorization and tls blocks of a nats-server
// configuration file, in nats-server's own format (users with passwords or
// NKeys and their permissions, or a token; the server certificate, and a CA
// to verify clients by). kvlive's own stages connect in-process, past TLS,
// as a user of their own with a random password, or with the one token or
// user the file names.
type ListenAuth struct {
	// Path is the file it was read from.
	Path string
	opts *server.Options
	// self are the options of kvlive's own in-process connection.
	self []nats.Option
}

// LoadListenAuth reads a listen configuration. A file with anything beside
// authorization and tls (and variables those use, and
// deploy/nats/kvlive-permissions.conf's roles, given to users or not), or
// without any authorization, is refused, naming what is wrong.
func LoadListenAuth(path string) (*ListenAuth, error) {
	m, err := conf.ParseFileWithChecks(path)
	if err != nil {
		return nil, fmt.Errorf("nats: listen configuration: %w", err)
	}
	unusedRoles := false
	for key, v := range m {
		if slices.Contains(listenKeys, strings.ToLower(key)) {
			continue
		}
		if tk, ok := v.(interface{ IsUsedVariable() bool }); ok && tk.IsUsedVariable() {
			continue
		}
		if kvliveRole.MatchString(key) {
			// A role of deploy/nats/kvlive-permissions.conf no user has:
			// nats-server refuses a variable nothing references, so a file
			// that includes every role and gives users some of them would
			// not load.
			unusedRoles = true
			continue
		}
		return nil, fmt.Errorf("nats: listen configuration %s: %q is not for the embedded server, which takes only %s "+
			"(run a nats-server and point --nats-url at it for more)", path, key, strings.Join(listenKeys, " and "))
	}
	// nats-server's own reading: it refuses what it does not know.
	o, err := processConfig(path, unusedRoles)
	if err != nil {
		return nil, fmt.Errorf("nats: listen configuration: %w", err)
	}
	a := &ListenAuth{Path: path, opts: o}
	switch {
	case len(o.Users)+len(o.Nkeys) > 0:
		if slices.ContainsFunc(o.Users, func(u *server.User) bool { return u.Username == embeddedUser }) {
			return nil, fmt.Errorf("nats: listen configuration %s: the user %q is kvlive's own", path, embeddedUser)
		}
		// A user without a password lets anyone in under its name, unless
		// TLS maps client certificates to users.
		if i := slices.IndexFunc(o.Users, func(u *server.User) bool { return u.Password == "" }); i >= 0 && !o.TLSMap {
			return nil, fmt.Errorf("nats: listen configuration %s: the user %q has no password, so anyone could log in as it: "+
				"give it one (or an NKey, or map TLS client certificates to users with verify_and_map)", path, o.Users[i].Username)
		}
		password := rand.Text()
		o.Users = append(o.Users, &server.User{Username: embeddedUser, Password: password})
		a.self = []nats.Option{nats.UserInfo(embeddedUser, password)}
	case o.Authorization != "":
		if isBcrypt(o.Authorization) {
			return nil, fmt.Errorf("nats: listen configuration %s: kvlive cannot log in with a bcrypt-hashed token; give users instead", path)
		}
		a.self = []nats.Option{nats.Token(o.Authorization)}
	case o.Username != "":
		if o.Password == "" {
			return nil, fmt.Errorf("nats: listen configuration %s: the user %q has no password, so anyone could log in as it", path, o.Username)
		}
		if isBcrypt(o.Password) {
			return nil, fmt.Errorf("nats: listen configuration %s: kvlive cannot log in as a user with a bcrypt-hashed password; give a users list instead", path)
		}
		a.self = []nats.Option{nats.UserInfo(o.Username, o.Password)}
	default:
		return nil, fmt.Errorf("nats: listen configuration %s sets no authorization (users, nkeys or a token)", path)
	}
	return a, nil
}

// TLS reports whether the configuration makes clients use TLS.
func (a *ListenAuth) TLS() bool { return a.opts.TLSConfig != nil }

func isBcrypt(s string) bool { return strings.HasPrefix(s, "$2") }

// Self are the options kvlive's own in-process connection logs in with
// (ConnectEmbedded's extra options).
func (a *ListenAuth) Self() []nats.Option { return a.self }

// serverOptions are the embedded server's options with a's authorization
// and TLS (none for a nil a), for the caller to complete.
func (a *ListenAuth) serverOptions() *server.Options {
	if a == nil {
		return &server.Options{}
	}
	return a.opts.Clone()
}

// LocalURL is where a process on this machine reaches ns: its client URL,
// with loopback for an address that listens on every interface (0.0.0.0,
// ::), which is no address to dial, nor one a certificate names.
func LocalURL(ns *server.Server) string {
	u, err := url.Parse(ns.ClientURL())
	if err != nil {
		return ns.ClientURL()
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		loopback := "127.0.0.1"
		if ip.To4() == nil {
			loopback = "::1"
		}
		u.Host = net.JoinHostPort(loopback, u.Port())
	}
	return u.String()
}
