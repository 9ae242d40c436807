package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/gateway/console"
)

const wantCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// built is a build's layout: index.html, the assets beside it.
func built() fstest.MapFS {
	return fstest.MapFS{
		".gitkeep":   {Data: nil},
		"index.html": {Data: []byte(`<!doctype html><title>mcpbus</title><script type="module" src="/assets/app.js"></script>`)},
		"app.js":     {Data: []byte(`console.log("app")`)},
		"app.css":    {Data: []byte(`body{margin:0}`)},
		"logo.svg":   {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
	}
}

func get(t *testing.T, h http.Handler, method, path, accept string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func checkSecurity(t *testing.T, what string, w *httptest.ResponseRecorder) {
	t.Helper()
	for k, want := range map[string]string{
		"Content-Security-Policy": wantCSP,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		// frame-ancestors 'none' is the rule; X-Frame-Options keeps the
		// approve buttons out of frames in browsers without CSP level 2.
		"X-Frame-Options": "DENY",
	} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s: %s = %q, want %q", what, k, got, want)
		}
	}
}

func TestCSPConstant(t *testing.T) {
	if console.CSP != wantCSP {
		t.Fatalf("CSP %q", console.CSP)
	}
}

func TestServesBuild(t *testing.T) {
	c := console.New(built())
	if !c.Built() {
		t.Fatal("a build with index.html reads as not built")
	}
	for _, tc := range []struct{ path, accept, ctype, body string }{
		{"/", "text/html", "text/html; charset=utf-8", "/assets/app.js"},
		{"/", "", "text/html; charset=utf-8", "/assets/app.js"},
		{"/index.html", "", "text/html; charset=utf-8", "/assets/app.js"},
		{"/assets/app.js", "*/*", "text/javascript; charset=utf-8", `console.log("app")`},
		{"/assets/app.css", "text/css", "text/css; charset=utf-8", "margin:0"},
		{"/assets/logo.svg", "", "image/svg+xml", "<svg"},
		// Client-side pages (hash routes) and any other browser navigation: the page.
		{"/servers", "text/html,application/xhtml+xml,*/*;q=0.8", "text/html; charset=utf-8", "/assets/app.js"},
		{"/some/deep/link", "text/html", "text/html; charset=utf-8", "/assets/app.js"},
	} {
		w := get(t, c, "GET", tc.path, tc.accept)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != tc.ctype || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("GET %s: %d %q %q", tc.path, w.Code, w.Header().Get("Content-Type"), w.Body.String())
		}
		checkSecurity(t, tc.path, w)
		if cc := w.Header().Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q", tc.path, cc)
		}
		// Revalidation with the ETag costs a 304 and no body.
		etag := w.Header().Get("ETag")
		if !strings.HasPrefix(etag, `"`) {
			t.Fatalf("GET %s: ETag %q", tc.path, etag)
		}
		w = get(t, c, "GET", tc.path, tc.accept, "If-None-Match", etag)
		if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
			t.Errorf("GET %s with If-None-Match: %d %q", tc.path, w.Code, w.Body.String())
		}
	}
	// HEAD: the headers alone.
	if w := get(t, c, "HEAD", "/assets/app.js", ""); w.Code != http.StatusOK || w.Body.Len() != 0 || w.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("HEAD: %d %q", w.Code, w.Body.String())
	}
	// Assets of different content have different ETags.
	if a, b := get(t, c, "GET", "/assets/app.js", "").Header().Get("ETag"), get(t, c, "GET", "/assets/app.css", "").Header().Get("ETag"); a == b {
		t.Errorf("app.js and app.css share the ETag %s", a)
	}
}

func TestNotFound(t *testing.T) {
	c := console.New(built())
	for _, tc := range []struct{ method, path, accept string }{
		{"GET", "/assets/missing.js", "*/*"},
		{"GET", "/assets/missing.js", "text/html"}, // an asset is never the page
		{"GET", "/assets/.gitkeep", ""},            // dot files are not served
		{"GET", "/assets/", ""},
		{"GET", "/assets/../index.html", ""},
		{"GET", "/somewhere", "application/json"}, // not a browser: no page
		{"GET", "/somewhere", ""},
	} {
		w := get(t, c, tc.method, tc.path, tc.accept)
		var e apierr.Error
		if w.Code != http.StatusNotFound || json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Code != apierr.NotFound ||
			w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s %s (Accept %q): %d %q", tc.method, tc.path, tc.accept, w.Code, w.Body.String())
		}
		checkSecurity(t, tc.path, w)
	}
	// The browser's own request for an icon: no 404 in the page's console.
	if w := get(t, c, "GET", "/favicon.ico", "image/*"); w.Code != http.StatusNoContent {
		t.Errorf("GET /favicon.ico without one: %d", w.Code)
	}
	withIcon := built()
	withIcon["favicon.ico"] = &fstest.MapFile{Data: []byte{0, 0, 1, 0}}
	if w := get(t, console.New(withIcon), "GET", "/favicon.ico", "image/*"); w.Code != http.StatusOK || w.Header().Get("Content-Type") != "image/x-icon" {
		t.Errorf("GET /favicon.ico: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if w := get(t, c, "POST", "/", "text/html"); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d %q", w.Code, w.Header().Get("Allow"))
	}
}

// The API's paths never get the page, even from a browser: the gateway's
// routes (or its 404/405 in the error contract) answer them.
func TestNeverShadowsAPI(t *testing.T) {
	c := console.New(built())
	for _, p := range []string{"/api", "/api/v1/servers", "/api/v1/nope", "/mcp", "/mcp/tools", "/v1", "/v1/models",
		"/healthz", "/readyz"} {
		if !console.IsAPIPath(p) {
			t.Errorf("IsAPIPath(%s) = false", p)
		}
		r := httptest.NewRequest("GET", p, nil)
		r.Header.Set("Accept", "text/html")
		if c.Fallback(r) {
			t.Errorf("Fallback(GET %s) = true", p)
		}
		if w := get(t, c, "GET", p, "text/html"); w.Code != http.StatusNotFound || strings.Contains(w.Body.String(), "<title>") {
			t.Errorf("GET %s: %d %q", p, w.Code, w.Body.String())
		}
	}
	for _, p := range []string{"/", "/servers", "/apix", "/mcpbus", "/v10", "/healthzz", "/assets/app.js"} {
		if console.IsAPIPath(p) {
			t.Errorf("IsAPIPath(%s) = true", p)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		r := httptest.NewRequest(m, "/servers", nil)
		r.Header.Set("Accept", "text/html")
		if c.Fallback(r) {
			t.Errorf("Fallback(%s /servers) = true", m)
		}
	}
}

// Without a build (a fresh clone: dist holds .gitkeep only) the page says how
// to build it, with the same headers; assets are 404.
func TestNotBuilt(t *testing.T) {
	c := console.New(fstest.MapFS{".gitkeep": {Data: nil}})
	if c.Built() {
		t.Fatal("reads as built")
	}
	for _, p := range []string{"/", "/servers"} {
		w := get(t, c, "GET", p, "text/html")
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/html; charset=utf-8" ||
			!strings.Contains(w.Body.String(), "The console is not built: run <code>make console</code>") {
			t.Errorf("GET %s: %d %q", p, w.Code, w.Body.String())
		}
		checkSecurity(t, p, w)
		// No inline script or style the CSP would block.
		if b := w.Body.String(); strings.Contains(b, "<script") || strings.Contains(b, "<style") || strings.Contains(b, "style=") {
			t.Errorf("the not-built page has inline code: %s", b)
		}
	}
	if w := get(t, c, "GET", "/assets/app.js", ""); w.Code != http.StatusNotFound {
		t.Errorf("asset without a build: %d", w.Code)
	}
}

// The embedded build: whatever dist holds (the not-built page on a fresh
// clone), the handler serves / with the security headers.
func TestEmbedded(t *testing.T) {
	c := console.Handler()
	w := get(t, c, "GET", "/", "text/html")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	checkSecurity(t, "/", w)
	t.Logf("embedded console built: %v", c.Built())
}
