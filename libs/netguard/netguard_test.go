package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/mcpbus/mcpbus/libs/netguard/netguardtest"
)

func TestInternalHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "10.1.2.3": true, "169.254.169.254": true, "100.64.0.1": true, "::1": true,
		"fe80::1": true, "0.0.0.0": true, "::ffff:10.0.0.1": true, "localhost": true, "LOCALHOST.": true,
		"db.internal": true, "printer.local": true, "2130706433": true, "0x7f.1": true, "": true,
		"example.com": false, "8.8.8.8": false, "2001:4860:4860::8888": false, "mcp.notion.com": false,
		// IPv4 inside IPv6 (NAT64, 6to4, compatible, translated), and ranges
		// netip does not call private.
		"64:ff9b::a9fe:a9fe": true, "64:ff9b:1::a00:1": true, "2002:a9fe:a9fe::": true, "::a9fe:a9fe": true,
		"::7f00:1": true, "::ffff:0:a9fe:a9fe": true, "fec0::1": true, "198.18.0.1": true, "192.0.0.1": true,
		"240.0.0.1": true, "0.1.2.3": true, "64:ff9b::808:808": false, "2002:808:808::": false,
	} {
		if got := InternalHost(host); got != want {
			t.Errorf("InternalHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestDialsAfterResolution: the guarded transport checks the address it
// dials, whatever name led there (a public name resolving inside).
func TestDialsAfterResolution(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	g := Guard{Internal: func(ip netip.Addr) bool { return ip.IsLoopback() }}
	dial := g.transport(&http.Transport{}).DialContext
	if c, err := dial(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", port)); !errors.Is(err, ErrInternal) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("dial to a loopback address: %v, want refused", err)
	}
	// "localhost" resolves to loopback: the name is not what is checked.
	if _, err := dial(context.Background(), "tcp", net.JoinHostPort("localhost", port)); !errors.Is(err, ErrInternal) {
		t.Fatalf("dial by a name resolving inside: %v, want refused", err)
	}
	open := Guard{Internal: func(netip.Addr) bool { return false }}
	c, err := open.transport(&http.Transport{}).DialContext(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatalf("dial allowed by the guard: %v", err)
	}
	_ = c.Close()
}

// TestClientRefusesInternalURLs: a URL or a redirect naming an internal
// host is refused before any connection, and https never redirects to
// http.
func TestClientRefusesInternalURLs(t *testing.T) {
	var hits int
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	// 127.0.0.1 counts as public here, so the test's servers are reachable.
	g := Guard{Internal: func(ip netip.Addr) bool { return !ip.IsLoopback() && InternalAddr(ip) }}
	c := g.Client(nil)
	if resp, err := c.Get(target.URL); err != nil || hits != 1 {
		t.Fatalf("public URL: %v, %d hits", err, hits)
	} else {
		_ = resp.Body.Close()
	}
	if _, err := c.Get("http://10.0.0.1:1/"); !errors.Is(err, ErrInternal) {
		t.Fatalf("internal URL: %v", err)
	}
	if _, err := c.Post(redirect.URL, "application/json", nil); !errors.Is(err, ErrInternal) {
		t.Fatalf("redirect inside: %v", err)
	}
	if (Guard{}).Inside(context.Background(), target.URL) != true {
		t.Fatal("a loopback URL is not inside")
	}
}

// TestPublicNameResolvingInside: a name that looks public but resolves to
// loopback is refused on the address dialed, and the error names the
// address and its class; the same name under a guard that lets loopback
// through reaches the server (so the refusal is the guard's, not the
// lookup's).
func TestPublicNameResolvingInside(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	res := netguardtest.Resolver(map[string][]netip.Addr{"mcp.example.test": {netip.MustParseAddr("127.0.0.1")}})
	url := "http://" + net.JoinHostPort("mcp.example.test", port) + "/"

	_, err := Guard{Resolver: res}.Client(nil).Get(url)
	ie, ok := errors.AsType[*InternalError](err)
	if !ok || !errors.Is(err, ErrInternal) || ie.Class != "loopback" || ie.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("a public name resolving to loopback: %v, want refused as loopback", err)
	}
	open := Guard{Resolver: res, Internal: func(netip.Addr) bool { return false }}
	resp, err := open.Client(nil).Get(url)
	if err != nil {
		t.Fatalf("the same name, loopback allowed: %v", err)
	}
	_ = resp.Body.Close()
	if !(Guard{Resolver: res}).Inside(context.Background(), url) {
		t.Fatal("a name resolving only to loopback is not inside")
	}
}

func TestClass(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "10.1.2.3": "private", "192.168.1.1": "private", "fd00::1": "private",
		"169.254.169.254": "link-local", "fe80::1": "link-local", "100.64.0.1": "shared (CGNAT)", "0.0.0.0": "unspecified",
		"::": "unspecified", "224.0.0.1": "multicast", "198.18.0.1": "reserved", "240.0.0.1": "reserved", "fec0::1": "reserved",
		"::ffff:10.0.0.1": "private", "64:ff9b::a9fe:a9fe": "link-local (IPv4 inside IPv6)",
		"2002:7f00:1::": "loopback (IPv4 inside IPv6, 6to4)", "8.8.8.8": "public", "2001:4860:4860::8888": "public",
	} {
		if got := Class(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Class(%s) = %q, want %q", addr, got, want)
		}
	}
}

// TestWithinKeepsTheServerInside: the client of a server judged inside
// reaches its host only at internal addresses; a name that now resolves
// public (rebound) is refused, and other hosts are not checked.
func TestWithinKeepsTheServerInside(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	names := netguardtest.Resolver(map[string][]netip.Addr{"mcp.example.test": {netip.MustParseAddr("127.0.0.1")}, "as.example.test": {netip.MustParseAddr("127.0.0.1")}})
	base := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Resolver: names}).DialContext}}
	get := func(g Guard, host string) error {
		resp, err := g.Within(base, "mcp.example.test").Get("http://" + net.JoinHostPort(host, port) + "/")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	inside := Guard{Resolver: names} // 127.0.0.1 is internal
	if err := get(inside, "mcp.example.test"); err != nil {
		t.Fatalf("the server at an internal address: %v", err)
	}
	public := Guard{Resolver: names, Internal: func(netip.Addr) bool { return false }}
	if err := get(public, "mcp.example.test"); !errors.Is(err, ErrLeftInside) {
		t.Fatalf("the server at a public address: %v, want ErrLeftInside", err)
	}
	if err := get(public, "as.example.test"); err != nil {
		t.Fatalf("another host: %v", err)
	}
}
