package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// Where a webhook may be called. kvlive calls what a rollout policy names,
// and a policy may come from whoever may annotate an instance type: a
// webhook URL must not reach what only kvlive's own host can (its metrics
// port answers 200 to anything), nor the link-local addresses where cloud
// metadata services answer. So a connection to a loopback, link-local or
// unspecified address, or to one of this host's own addresses, is refused
// unless the operator allowed it (--webhook-allow-host); and a policy
// from a namespaced object (a tenant's) may only name hosts the operator
// allowed.

// allowList is the operator's --webhook-allow-host entries: host names,
// IP addresses and CIDR prefixes.
type allowList struct {
	names    map[string]bool
	prefixes []netip.Prefix
}

// parseAllowList reads the entries, refusing what is neither a host name,
// an IP address nor a CIDR prefix.
func parseAllowList(entries []string) (allowList, error) {
	l := allowList{names: map[string]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(strings.ToLower(e))
		if p, err := netip.ParsePrefix(e); err == nil {
			l.prefixes = append(l.prefixes, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			l.prefixes = append(l.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		if e == "" || strings.ContainsAny(e, "/:@ ") {
			return l, fmt.Errorf("webhook: allowed host %q: want a host name, an IP address or a CIDR prefix", e)
		}
		l.names[e] = true
	}
	return l, nil
}

// addr reports whether a is allowed.
func (l allowList) addr(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range l.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// host reports whether a URL's host (a name or an address) is allowed.
func (l allowList) host(h string) bool {
	if a, err := netip.ParseAddr(h); err == nil {
		return l.addr(a)
	}
	return l.names[strings.ToLower(h)]
}

// ErrNotAllowed is a webhook URL or address the operator did not allow.
var ErrNotAllowed = errors.New("not allowed for webhooks")

// Permits says why a rollout policy from a namespaced object (a tenant's)
// may not name rawURL as a webhook: its host is not one the operator
// allowed with --webhook-allow-host. nil means it may.
func (c *Client) Permits(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("webhook URL %s: %w", Redact(rawURL), err)
	}
	if c == nil || !c.allow.host(u.Hostname()) {
		return fmt.Errorf("%w: %s names host %q, which the operator has not allowed for policies of namespaced objects (kvlive run --webhook-allow-host)",
			ErrNotAllowed, Redact(rawURL), u.Hostname())
	}
	return nil
}

// control refuses, as the connection is made (after any name resolution,
// so a name that resolves to a refused address is refused too), an
// address no webhook may reach unless allowed.
func (l allowList) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: address %q: %w", address, err)
	}
	a := ap.Addr().Unmap()
	if l.addr(a) {
		return nil
	}
	var what string
	switch {
	case a.IsLoopback():
		what = "a loopback address"
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		what = "a link-local address (where cloud metadata services answer)"
	case a.IsUnspecified():
		what = "the unspecified address"
	case ownAddress(a):
		what = "an address of kvlive's own host"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s is %s; kvlive run --webhook-allow-host %s allows it", ErrNotAllowed, ap, what, a)
}

// ownAddress reports whether a is one of this host's interface addresses.
func ownAddress(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if own, ok := netip.AddrFromSlice(n.IP); ok && own.Unmap() == a {
				return true
			}
		}
	}
	return false
}
