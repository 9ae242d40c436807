package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// With --no-auth, a listener that is not loopback (a container's port
// published on the host's 127.0.0.1) answers a loopback Host or the public
// URL's host only: a page whose name was made to resolve to the host (DNS
// rebinding) sends its own. With auth on, only loopback listeners check.
func TestNoAuthRefusesForeignHostOnAnyListener(t *testing.T) {
	container := &net.TCPAddr{IP: net.ParseIP("172.18.0.5"), Port: 8080}
	send := func(h http.Handler, host string) int {
		req := httptest.NewRequest("POST", "/api/v1/servers", strings.NewReader(`{}`))
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, net.Addr(container)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	noAuth := hostGuard(true, "https://MCP.example.com", writeGuard(nil, ok))
	for _, host := range []string{"attacker.example:8080", "attacker.example", "172.18.0.5:8080", "mcp.example.com.evil.example"} {
		if code := send(noAuth, host); code != http.StatusForbidden {
			t.Errorf("--no-auth, Host %s: %d, want 403", host, code)
		}
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "mcp.example.com", "mcp.example.com:443"} {
		if code := send(noAuth, host); code != http.StatusNoContent {
			t.Errorf("--no-auth, Host %s: %d, want it served", host, code)
		}
	}
	v6 := hostGuard(true, "http://[2001:db8::1]", ok)
	for _, host := range []string{"[2001:db8::1]", "[2001:db8::1]:80"} {
		if code := send(v6, host); code != http.StatusNoContent {
			t.Errorf("--no-auth, IPv6 public URL, Host %s: %d, want it served", host, code)
		}
	}
	if code := send(hostGuard(true, "", ok), "attacker.example"); code != http.StatusForbidden {
		t.Errorf("--no-auth without a public URL, foreign Host: %d, want 403", code)
	}
	// With keys on, the key is what counts there.
	if code := send(hostGuard(false, "", ok), "attacker.example"); code != http.StatusNoContent {
		t.Errorf("auth on, non-loopback listener, foreign Host: %d, want it served", code)
	}
}

// --cors-origin '*' switches the Origin check of writes off: with
// --no-auth every page the user opens could call every tool.
func TestNoAuthRefusesAnyOrigin(t *testing.T) {
	for _, pat := range []string{"*", "https://*", "http*"} {
		o := Options{NoAuth: true, CORSOrigins: []string{"http://localhost:6274", pat}}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--cors-origin") {
			t.Fatalf("--no-auth with --cors-origin %q: %v, want refused", pat, err)
		}
	}
	o := Options{NoAuth: true}
	o.CORSOrigins = []string{"http://localhost:6274"}
	if err := o.Validate(); err != nil {
		t.Fatalf("--no-auth with a named origin: %v", err)
	}
}
