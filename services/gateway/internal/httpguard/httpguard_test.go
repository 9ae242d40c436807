package httpguard

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// isLoopbackParseIP is IsLoopback as it was written with net.ParseIP: the
// reference the netip version must agree with.
func isLoopbackParseIP(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func TestIsLoopbackAgreesWithParseIP(t *testing.T) {
	for _, hp := range []string{
		"localhost", "localhost:8080", "LOCALHOST", "127.0.0.1", "127.0.0.1:80", "127.1.2.3:9",
		"[::1]", "[::1]:8080", "::1", "[::1%25lo]:80", "::1%lo", "[fe80::1%eth0]:80",
		"::ffff:127.0.0.1", "[::ffff:127.0.0.1]:80", "::ffff:10.0.0.1", "0:0:0:0:0:0:0:1",
		"10.0.0.1", "10.0.0.1:80", "128.0.0.1", "0.0.0.0", "[::]:80", "example.com",
		"example.com:443", "127.0.0.1.nip.io", "127.000.000.001", "0127.0.0.1", "", ":80",
		"[127.0.0.1]", "[[::1]]", "1.2.3.4.5", "::1:80", "[::1]:", "localhost:",
	} {
		if got, want := IsLoopback(hp), isLoopbackParseIP(hp); got != want {
			t.Errorf("IsLoopback(%q) = %v, net.ParseIP's answer %v", hp, got, want)
		}
	}
}

func TestForeignHost(t *testing.T) {
	for _, c := range []struct {
		local   net.Addr
		host    string
		foreign bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}, "localhost:80", false},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}, "evil.example", true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 80}, "[::1]:80", false},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 80}, "evil.example:80", true},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 80}, "evil.example", false},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, "evil.example", false},
		{nil, "evil.example", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		r.Host = c.host
		if c.local != nil {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, c.local))
		}
		if got := ForeignHost(r); got != c.foreign {
			t.Errorf("ForeignHost(local %v, Host %q) = %v, want %v", c.local, c.host, got, c.foreign)
		}
	}
}

// TestForeignHostAllocatesNothing: the check runs twice on every request;
// with net.ParseIP and the local address formatted it made 3 objects.
func TestForeignHostAllocatesNothing(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Host = "127.0.0.1:8080"
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey,
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}))
	if n := testing.AllocsPerRun(100, func() { _ = ForeignHost(r) }); n != 0 {
		t.Errorf("ForeignHost allocates %v objects a request, want 0", n)
	}
}
