package auth

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies are the reverse proxies (--trusted-proxy CIDRs) whose
// X-Forwarded-For or Forwarded header names the client. Behind a proxy
// every request comes from the proxy's address, so the failed-login
// throttle and the anonymous rate limit need the client's instead; but
// anyone can send those headers, so they count only from these peers.
type Proxies []netip.Prefix

// ParseProxies reads CIDRs ("10.0.0.0/8"); a bare address is its own /32
// or /128.
func ParseProxies(list []string) (Proxies, error) {
	var out Proxies
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxy %q is neither a CIDR (10.0.0.0/8) nor an address", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (p Proxies) trusts(a netip.Addr) bool {
	for _, pre := range p {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

// ClientAddr is the address of r's client, without the port: the direct
// peer, unless the peer is a trusted proxy; then the rightmost address of
// X-Forwarded-For (or, without it, of Forwarded) that is not a trusted
// proxy, as each proxy appends the peer it saw and only the entries a
// trusted one wrote are believed. Entries left of it are the client's own
// claims. A list of only trusted proxies gives its leftmost; an entry that
// is no address (unknown, an obfuscated name) ends the walk at the proxy
// that wrote it.
func (p Proxies) ClientAddr(r *http.Request) string {
	peer := remoteIP(r)
	if len(p) == 0 {
		return peer
	}
	a, err := netip.ParseAddr(peer)
	if err != nil || !p.trusts(a.Unmap()) {
		return peer
	}
	hops := forwardedFor(r.Header)
	client := a.Unmap()
	for i := len(hops) - 1; i >= 0; i-- {
		h, ok := parseHop(hops[i])
		if !ok {
			break
		}
		client = h
		if !p.trusts(h) {
			break
		}
	}
	return client.String()
}

// forwardedFor lists the hops of X-Forwarded-For (every header line, in
// order) or, when there is none, the for= of Forwarded (RFC 7239). A proxy
// trusted here must write X-Forwarded-For, or strip a client's before
// writing only Forwarded.
func forwardedFor(h http.Header) []string {
	var hops []string
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		for _, line := range xff {
			for hop := range strings.SplitSeq(line, ",") {
				hops = append(hops, strings.TrimSpace(hop))
			}
		}
		return hops
	}
	for _, line := range h.Values("Forwarded") {
		for elem := range strings.SplitSeq(line, ",") {
			hop := "" // an element without for= is a hop we cannot place
			for pair := range strings.SplitSeq(elem, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
				if strings.EqualFold(k, "for") {
					hop = strings.Trim(v, `"`)
				}
			}
			hops = append(hops, hop)
		}
	}
	return hops
}

// parseHop reads 192.0.2.1, 192.0.2.1:4711, 2001:db8::1 or [2001:db8::1]:4711.
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap(), true
		}
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

type clientKey struct{}

// Middleware records each request's client address (ClientAddr) for the
// handlers inside: the throttles, the rate limit and the access log.
func (p Proxies) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, p.ClientAddr(r))))
	})
}

// ClientAddr is the client address Proxies.Middleware recorded for r, or
// without it r's direct peer.
func ClientAddr(r *http.Request) string {
	if s, ok := r.Context().Value(clientKey{}).(string); ok {
		return s
	}
	return remoteIP(r)
}
