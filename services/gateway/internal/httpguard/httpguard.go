// Package httpguard holds the gateway's checks of where a request comes
// from, shared by the HTTP middleware and the MCP call fast path so that
// both apply exactly the same rule.
package httpguard

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// IsLoopback reports whether hostport (a Host header or an address, with or
// without a port) names the local machine: localhost, 127.0.0.0/8 or [::1].
// It runs twice on every request (the host guard and the MCP fast path), so
// it parses with net/netip, which allocates nothing; an address with a zone
// is not loopback, as net.ParseIP, which refuses zones, had it.
func IsLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Zone() == "" && ip.IsLoopback()
}

// ForeignHost is go-sdk's DNS-rebinding rule: a request that reached a
// loopback address of the gateway with a Host header that does not name the
// local machine. A browser page of another site whose name was made to
// resolve to 127.0.0.1 sends its own name as Host: refused.
func ForeignHost(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || la == nil {
		return false
	}
	local := false
	if tcp, isTCP := la.(*net.TCPAddr); isTCP {
		local = tcp.IP.IsLoopback() // without formatting the address
	} else {
		local = IsLoopback(la.String())
	}
	return local && !IsLoopback(r.Host)
}
