package registry

import (
	"net/netip"
	"strings"
)

// A registry entry is someone else's text: its remote URL must not point
// mcpbus (the runner, the gateway's OAuth probe) at the host's own or its
// network's services, such as cloud metadata (169.254.169.254), the NATS
// port on localhost or an admin port on the LAN. Only the literal host is
// checked: a public name that resolves to such an address is the runner's
// network policy to stop. A server on such an address is added by hand.

// cgnat is 100.64.0.0/10 (RFC 6598), which netip does not count as private.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// internalSuffixes are names that never leave the host or the site.
var internalSuffixes = []string{".localhost", ".local", ".internal", ".home.arpa", ".lan"}

// internalHost reports whether host (a URL's Hostname) names a loopback,
// private, link-local, shared or unspecified address, or a name of the host
// or the site; a numeric host that is not a plain address (2130706433,
// 0x7f.1: resolvers read them as IPv4) counts too.
func internalHost(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		ip = ip.Unmap()
		return !ip.IsGlobalUnicast() || ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || cgnat.Contains(ip)
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
