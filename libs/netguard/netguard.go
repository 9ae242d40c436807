// Package netguard keeps requests that someone else's text aims (a registry
// entry's URL, an OAuth authorization server's metadata) off the host's own
// addresses and its network's: cloud metadata (169.254.169.254), the NATS
// port on localhost, an admin port on the LAN.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// internalV4 are IPv4 ranges off the public internet that netip does not
// count as private, loopback or link-local: shared (CGNAT, RFC 6598), "this
// network", IETF protocol assignments, benchmarking, reserved.
var internalV4 = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("240.0.0.0/4"),
}

// embedsV4 are IPv6 ranges whose addresses carry an IPv4 address a
// network may route to (NAT64, IPv4-compatible and -translated), the IPv4
// in their last 32 bits; 6to4 (2002::/16) carries it in bits 16-47.
var embedsV4 = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("::/96"), netip.MustParsePrefix("::ffff:0:0:0/96"),
}

var (
	sixToFour = netip.MustParsePrefix("2002::/16")
	siteLocal = netip.MustParsePrefix("fec0::/10") // deprecated, still routed inside some sites
)

// internalSuffixes are names that never leave the host or the site.
var internalSuffixes = []string{".localhost", ".local", ".internal", ".home.arpa", ".lan"}

// InternalAddr reports whether ip is a loopback, private, link-local,
// shared (CGNAT), multicast or unspecified address: one that is not on the
// public internet.
func InternalAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || !ip.IsGlobalUnicast() || ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
		return true
	}
	if ip.Is4() {
		for _, p := range internalV4 {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	b := ip.As16()
	for _, p := range embedsV4 {
		if p.Contains(ip) {
			return InternalAddr(netip.AddrFrom4([4]byte(b[12:16])))
		}
	}
	if sixToFour.Contains(ip) {
		return InternalAddr(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return siteLocal.Contains(ip)
}

// InternalHost reports whether host (a URL's Hostname), as written, names
// an internal address or a name of the host or the site; a numeric host
// that is not a plain address (2130706433, 0x7f.1: resolvers read them as
// IPv4) counts too. What a public name resolves to is Guard's to check.
func InternalHost(host string) bool { return Guard{}.literal(host) }

// Class names the kind of internal address ip is: loopback, private,
// link-local (169.254.169.254: cloud metadata), shared (CGNAT), multicast,
// unspecified or reserved; for an IPv6 address carrying an IPv4 one (NAT64,
// 6to4, compatible, translated) the class of that IPv4 address, saying so;
// "public" for an address InternalAddr does not refuse.
func Class(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	}
	if ip.Is4() {
		if internalV4[0].Contains(ip) {
			return "shared (CGNAT)"
		}
		if InternalAddr(ip) {
			return "reserved"
		}
		return "public"
	}
	b := ip.As16()
	for _, p := range embedsV4 {
		if p.Contains(ip) {
			return Class(netip.AddrFrom4([4]byte(b[12:16]))) + " (IPv4 inside IPv6)"
		}
	}
	if sixToFour.Contains(ip) {
		return Class(netip.AddrFrom4([4]byte(b[2:6]))) + " (IPv4 inside IPv6, 6to4)"
	}
	if InternalAddr(ip) {
		return "reserved"
	}
	return "public"
}

// Guard refuses connections to internal addresses.
type Guard struct {
	// Internal tells the addresses to refuse (default InternalAddr; tests
	// name loopback addresses of their own).
	Internal func(netip.Addr) bool
	// Resolver resolves the names the guard checks and dials (nil: the
	// system's). Tests answer with their own, to make a name that looks
	// public resolve inside.
	Resolver *net.Resolver
}

// InternalError is the error of a connection refused for its address: the
// address dialed (host:port) and its class, or the host of a URL that
// names an internal host as written. It matches ErrInternal.
type InternalError struct {
	// Address is what was refused: a host:port dialed, or a URL's host.
	Address string
	// Addr is the address dialed (invalid for a host refused as written).
	Addr netip.Addr
	// Class is Class(Addr), or "local name" for a host refused as written
	// that is not an address.
	Class string
}

func (e *InternalError) Error() string {
	return fmt.Sprintf("%s: %s (%s)", ErrInternal.Error(), e.Address, e.Class)
}

// Is makes errors.Is(err, ErrInternal) match.
func (e *InternalError) Is(target error) bool { return target == ErrInternal }

// refusedHost is the error of a host refused as written.
func refusedHost(host string) *InternalError {
	e := &InternalError{Address: host, Class: "local name"}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		e.Addr, e.Class = ip, Class(ip)
	}
	return e
}

func (g Guard) resolver() *net.Resolver {
	if g.Resolver != nil {
		return g.Resolver
	}
	return net.DefaultResolver
}

func (g Guard) internal(ip netip.Addr) bool {
	if g.Internal != nil {
		return g.Internal(ip.Unmap())
	}
	return InternalAddr(ip)
}

// literal is InternalHost under g's idea of an internal address.
func (g Guard) literal(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return g.internal(ip)
	}
	if h == "" || h == "localhost" {
		return true
	}
	for _, s := range internalSuffixes {
		if strings.HasSuffix(h, s) {
			return true
		}
	}
	// No top-level domain is numeric: such a host is an address in a form
	// netip does not parse (decimal, octal, hex or short IPv4).
	last := h[strings.LastIndexByte(h, '.')+1:]
	return strings.HasPrefix(last, "0x") || strings.Trim(last, "0123456789") == ""
}

// Inside reports whether rawURL's host is internal as written or every
// address it resolves to (within 5 s) is internal: a server the operator
// runs inside their network, whose own authorization server may be there
// too. Every address, not any: a public server's operator controls its
// DNS, and one internal record beside the real ones must not switch the
// guard off. A host that does not resolve is not inside.
func (g Guard) Inside(ctx context.Context, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if g.literal(host) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := g.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !g.internal(ip) {
			return false
		}
	}
	return true
}

// ErrInternal is the error of a request refused for its address.
var ErrInternal = errors.New("refused: an internal address")

// maxRedirects bounds the redirects a guarded client follows.
const maxRedirects = 5

// Client is base (nil: a default client) made to reach public addresses
// only: the address every connection dials is checked after resolution
// (a public name that resolves inside is refused too), a URL or redirect
// naming an internal host is refused before any dial, and a redirect from
// https to http is refused. Through a proxy from the environment only the
// URL's host can be checked (the proxy resolves it). A base whose
// transport is not an *http.Transport keeps its transport and gets the URL
// and redirect checks only.
func (g Guard) Client(base *http.Client) *http.Client {
	if base == nil {
		base = &http.Client{}
	}
	c := *base
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	if t, ok := rt.(*http.Transport); ok {
		rt = g.transport(t)
	}
	c.Transport = urlCheck{g: g, next: rt}
	prev := base.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if last := via[len(via)-1]; last.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refused: a redirect from https to %s", req.URL.Scheme)
		}
		if g.literal(req.URL.Hostname()) {
			return fmt.Errorf("redirect: %w", refusedHost(req.URL.Hostname()))
		}
		if prev != nil {
			return prev(req, via)
		}
		return nil
	}
	return &c
}

// ErrLeftInside is the error of a connection to a server judged inside
// the operator's network (Within) that reached a public address.
var ErrLeftInside = errors.New("refused: a server inside the network reached at a public address")

// Within is base whose connections to host stay on internal addresses
// (checked on the address each dial reached): the client of a server
// Inside judged internal by what its name resolved to, whose requests are
// trusted with the operator's network. Without it, a name that answered
// Inside's lookup with internal addresses and a later dial with a public
// one (DNS rebinding) would lend that trust to a server outside. Only
// host's connections are checked (an internal server's authorization
// server may be anywhere), and none through a proxy, whose address alone
// is known here. A base whose transport is not an *http.Transport cannot
// be checked so: it gets Client's guard instead.
func (g Guard) Within(base *http.Client, host string) *http.Client {
	if base == nil {
		base = &http.Client{}
	}
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	t, ok := rt.(*http.Transport)
	if !ok {
		return g.Client(base)
	}
	out := t.Clone()
	dial := out.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: g.Resolver}).DialContext
	}
	want := canonicalHost(host)
	out.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h, _, err := net.SplitHostPort(addr); err != nil || canonicalHost(h) != want {
			return dial(ctx, network, addr)
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(conn.RemoteAddr().String())
		if err != nil || !g.internal(ap.Addr()) {
			_ = conn.Close()
			return nil, fmt.Errorf("%w: %s at %s", ErrLeftInside, host, conn.RemoteAddr())
		}
		return conn, nil
	}
	// A TLS dial of its own would bypass the check.
	out.DialTLSContext = nil
	c := *base
	c.Transport = out
	return &c
}

// canonicalHost is a host name or address as dials name it: lower case,
// without a trailing dot or an IPv6 address's brackets.
func canonicalHost(h string) string {
	return strings.Trim(strings.TrimSuffix(strings.ToLower(h), "."), "[]")
}

// transport is t dialing public addresses only, proxies from t's
// environment aside.
func (g Guard) transport(t *http.Transport) *http.Transport {
	out := t.Clone()
	proxies := map[string]bool{}
	if t.Proxy != nil {
		for _, scheme := range []string{"http", "https"} {
			req := &http.Request{URL: &url.URL{Scheme: scheme, Host: "example.com"}}
			if p, err := t.Proxy(req); err == nil && p != nil {
				proxies[hostPort(p)] = true
			}
		}
	}
	guarded := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: g.Resolver,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				host = address
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return &InternalError{Address: address, Class: "unparsed address"}
			}
			if g.internal(ip) {
				return &InternalError{Address: address, Addr: ip.Unmap(), Class: Class(ip)}
			}
			return nil
		}}
	plain := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: g.Resolver}
	out.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if proxies[addr] {
			return plain.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
	out.DialTLSContext = nil
	return out
}

// hostPort is a proxy URL's address with its scheme's port.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// urlCheck refuses a request whose URL names an internal host before it is
// sent (through a proxy, the only check there is).
type urlCheck struct {
	g    Guard
	next http.RoundTripper
}

func (u urlCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if u.g.literal(req.URL.Hostname()) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, refusedHost(req.URL.Hostname())
	}
	return u.next.RoundTrip(req)
}
