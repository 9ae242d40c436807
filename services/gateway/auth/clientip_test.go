package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

func TestClientAddr(t *testing.T) {
	proxies, err := auth.ParseProxies([]string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, peer string
		header     http.Header
		want       string
	}{
		{"no proxy header", "10.1.1.1:5000", nil, "10.1.1.1"},
		{"untrusted peer: its X-Forwarded-For is ignored", "198.51.100.9:5000",
			http.Header{"X-Forwarded-For": {"203.0.113.5"}}, "198.51.100.9"},
		{"untrusted peer: its Forwarded is ignored", "198.51.100.9:5000",
			http.Header{"Forwarded": {"for=203.0.113.5"}}, "198.51.100.9"},
		{"trusted peer names the client", "10.1.1.1:5000",
			http.Header{"X-Forwarded-For": {"203.0.113.5"}}, "203.0.113.5"},
		{"the rightmost untrusted hop, not the client's own claim", "10.1.1.1:5000",
			http.Header{"X-Forwarded-For": {"1.2.3.4, 203.0.113.5, 10.2.2.2"}}, "203.0.113.5"},
		{"several header lines are one list", "10.1.1.1:5000",
			http.Header{"X-Forwarded-For": {"1.2.3.4", "203.0.113.5,192.0.2.7"}}, "203.0.113.5"},
		{"a single trusted address", "192.0.2.7:80",
			http.Header{"X-Forwarded-For": {"203.0.113.6:4711"}}, "203.0.113.6"},
		{"only trusted hops: the leftmost", "10.1.1.1:5000",
			http.Header{"X-Forwarded-For": {"10.3.3.3, 10.2.2.2"}}, "10.3.3.3"},
		{"garbage ends the walk at the proxy that wrote it", "10.1.1.1:5000",
			http.Header{"X-Forwarded-For": {"203.0.113.5, bogus"}}, "10.1.1.1"},
		{"Forwarded when there is no X-Forwarded-For", "10.1.1.1:5000",
			http.Header{"Forwarded": {`for=198.51.100.1;proto=https, for="[2001:db8:cafe::17]:4711";by=x`}}, "198.51.100.1"},
		{"Forwarded with an IPv6 client", "10.1.1.1:5000",
			http.Header{"Forwarded": {`for="[2001:db9::17]:4711"`}}, "2001:db9::17"},
		{"Forwarded for=unknown is not an address", "10.1.1.1:5000",
			http.Header{"Forwarded": {`for=unknown`}}, "10.1.1.1"},
		{"X-Forwarded-For wins over Forwarded", "10.1.1.1:5000",
			http.Header{"X-Forwarded-For": {"203.0.113.5"}, "Forwarded": {"for=198.51.100.1"}}, "203.0.113.5"},
		{"IPv6 trusted peer", "[2001:db8::1]:5000",
			http.Header{"X-Forwarded-For": {"::ffff:203.0.113.5"}}, "203.0.113.5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/mcp", nil)
			r.RemoteAddr = c.peer
			for k, v := range c.header {
				r.Header[k] = v
			}
			if got := proxies.ClientAddr(r); got != c.want {
				t.Fatalf("ClientAddr = %q, want %q", got, c.want)
			}
			// The middleware records the same for the handlers inside.
			var seen string
			proxies.Middleware(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = auth.ClientAddr(r) })).
				ServeHTTP(httptest.NewRecorder(), r)
			if seen != c.want {
				t.Fatalf("recorded %q, want %q", seen, c.want)
			}
		})
	}
	// Without trusted proxies the headers never count.
	r := httptest.NewRequest("GET", "/mcp", nil)
	r.RemoteAddr = "10.1.1.1:5000"
	r.Header.Set("X-Forwarded-For", "203.0.113.5")
	if got := auth.Proxies(nil).ClientAddr(r); got != "10.1.1.1" {
		t.Fatalf("no trusted proxies: %q", got)
	}
	if _, err := auth.ParseProxies([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("a bad CIDR was accepted")
	}
	if _, err := auth.ParseProxies([]string{"proxy.example"}); err == nil {
		t.Fatal("a host name was accepted")
	}
}
