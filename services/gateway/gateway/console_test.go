package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/gateway/console"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// browse is a GET with a browser's Accept header and no key.
func (h *gw) browse(path, accept string) reply {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	return h.send(req)
}

// TestConsoleRoutes: the console is public at / and /assets/, a browser
// gets its page on other paths, and it never takes an API path: those keep
// their auth, their 404 and 405 in the error contract.
func TestConsoleRoutes(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	const html = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

	for _, path := range []string{"/", "/servers", "/a/b"} {
		r := h.browse(path, html)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
			r.header.Get("Content-Security-Policy") != console.CSP || r.header.Get("X-Content-Type-Options") != "nosniff" ||
			r.header.Get("Referrer-Policy") != "no-referrer" || r.header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s without a key: %d %v %s", path, r.status, r.header, r.body)
		}
	}
	// Not a browser: an unknown path is the API's 404.
	if r := h.browse("/servers", "application/json"); r.status != http.StatusNotFound || r.contract(t).Code != apierr.NotFound {
		t.Errorf("GET /servers as JSON: %d %s", r.status, r.body)
	}
	if r := h.browse("/assets/missing.js", "*/*"); r.status != http.StatusNotFound || r.contract(t).Code != apierr.NotFound ||
		r.header.Get("Content-Security-Policy") != console.CSP {
		t.Errorf("GET /assets/missing.js: %d %v %s", r.status, r.header, r.body)
	}
	if r := h.browse("/favicon.ico", "image/*"); r.status != http.StatusNoContent && r.status != http.StatusOK {
		t.Errorf("GET /favicon.ico: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/", "", map[string]string{}); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d %s", r.status, r.body)
	}

	// API paths, asked for by a browser, are never the page.
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/api/v1/servers", http.StatusUnauthorized},          // still needs a key
		{"/api/v1/nope", http.StatusUnauthorized},             // auth comes before the 404
		{"/mcp/tools", http.StatusUnauthorized},               // call scope
		{"/v1/models", http.StatusUnauthorized},               // chat scope
		{"/healthz", http.StatusOK},                           // public JSON
		{"/api/v1/openapi.json", http.StatusUnauthorized},     // the API's
		{"/api/v1/servers/x/enable", http.StatusUnauthorized}, // POST only
	} {
		r := h.browse(tc.path, html)
		if r.status != tc.status || strings.Contains(string(r.body), "<html") || r.header.Get("Content-Security-Policy") != "" {
			t.Errorf("GET %s from a browser: %d %q %s, want %d and no page", tc.path, r.status, r.header.Get("Content-Type"), r.body, tc.status)
		}
	}
	// With a key: the API's own 404 and 405.
	for path, status := range map[string]int{"/api/v1/nope": http.StatusNotFound, "/api/v1/servers/x/enable": http.StatusMethodNotAllowed} {
		req, _ := http.NewRequest("GET", h.url+path, nil)
		req.Header.Set("Accept", html)
		req.Header.Set("Authorization", "Bearer "+h.admin)
		if r := h.send(req); r.status != status || r.contract(t).Code == "" {
			t.Errorf("GET %s with a key: %d %s, want %d", path, r.status, r.body, status)
		}
	}
	// The console's pages are not API routes (openapi.json describes those).
	for _, route := range h.g.Routes() {
		if route.Pattern == "/{$}" || route.Pattern == "/favicon.ico" || strings.HasPrefix(route.Pattern, "/assets/") {
			t.Errorf("console route %s %s is listed among the API's", route.Method, route.Pattern)
		}
	}
}

// TestConsoleJaegerURL: --gateway-jaeger-url is checked and reaches the
// console through GET /api/v1/me, without a trailing slash.
func TestConsoleJaegerURL(t *testing.T) {
	for _, bad := range []string{"jaeger:16686", "ftp://jaeger", "http://", "/trace", "http://u:p@jaeger:16686", "http://jaeger/?x=1", "http://jaeger/#t"} {
		o := gateway.Options{JaegerURL: bad}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--gateway-jaeger-url") {
			t.Errorf("JaegerURL %q: %v", bad, err)
		}
	}
	for _, good := range []string{"", "http://127.0.0.1:16686", "https://jaeger.example.com/jaeger/"} {
		o := gateway.Options{JaegerURL: good}
		if err := o.Validate(); err != nil {
			t.Errorf("JaegerURL %q: %v", good, err)
		}
	}

	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{JaegerURL: "http://127.0.0.1:16686/"})
	var me struct {
		JaegerURL string `json:"jaeger_url"`
	}
	r := h.do("GET", "/api/v1/me", h.admin, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /api/v1/me: %d %s", r.status, r.body)
	}
	if r.decode(t, &me); me.JaegerURL != "http://127.0.0.1:16686" {
		t.Errorf("jaeger_url %q", me.JaegerURL)
	}
}
