// Package console serves the web console: the single-page app that
// services/gateway/console/web builds into dist/ (`make console`), embedded
// in the binary so running it needs no Node. The gateway mounts it at / and
// /assets/; every API call of the app carries the user's key, the page
// itself is public.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// dist is the build output; on a fresh clone only dist/.gitkeep, and then
// the handler serves NotBuiltPage.
//
//go:embed all:dist
var dist embed.FS

// CSP is the Content-Security-Policy of every console response: nothing but
// the gateway's own origin (no inline scripts or styles, no framing).
const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// NotBuiltPage is served for the app when dist/index.html is missing, so a
// `go build` without Node still gives a working gateway.
const NotBuiltPage = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>mcpbus console</title></head>
<body>
<h1>mcpbus console</h1>
<p>The console is not built: run <code>make console</code> (needs Node.js and npm), then rebuild mcpbus.</p>
<p>The REST API is at <a href="/api/v1/openapi.json">/api/v1/openapi.json</a>.</p>
</body>
</html>
`

// Paths the console never answers, so it cannot shadow an API route.
var apiRoots = []string{"/api", "/mcp", "/v1", "/healthz", "/readyz"}

// IsAPIPath reports whether p is (under) a path the gateway's API owns.
func IsAPIPath(p string) bool {
	for _, root := range apiRoots {
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}

// file is one served file, read once (the build is immutable).
type file struct {
	data  []byte
	ctype string
	etag  string
}

// Console is the handler of the console's pages and assets.
type Console struct {
	files map[string]*file // by path in dist, without a leading slash
	index *file
	built bool
}

// Handler serves the embedded build.
func Handler() *Console {
	sub, err := fs.Sub(dist, "dist")
	if err != nil { // "dist" is a valid path: cannot happen
		panic(err)
	}
	return New(sub)
}

// New serves the files of fsys, laid out as dist/ (index.html at the top,
// the assets beside it). Dot files (.gitkeep) are not served.
func New(fsys fs.FS) *Console {
	c := &Console{files: map[string]*file{}}
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable entry is simply not served
		}
		if p != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil
		}
		c.files[p] = newFile(p, data)
		return nil
	})
	c.index, c.built = c.files["index.html"]
	if !c.built {
		c.index = newFile("index.html", []byte(NotBuiltPage))
	}
	return c
}

func newFile(name string, data []byte) *file {
	sum := sha256.Sum256(data)
	return &file{data: data, ctype: contentType(name), etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}

// Built reports whether the app is there (dist/index.html); false means the
// not-built page is served.
func (c *Console) Built() bool { return c.built }

// types are the content types of what a build holds, fixed here rather than
// taken from the host's mime.types (which may say application/javascript or
// nothing at all).
var types = map[string]string{
	".html":  "text/html; charset=utf-8",
	".js":    "text/javascript; charset=utf-8",
	".mjs":   "text/javascript; charset=utf-8",
	".css":   "text/css; charset=utf-8",
	".json":  "application/json",
	".map":   "application/json",
	".svg":   "image/svg+xml",
	".png":   "image/png",
	".ico":   "image/x-icon",
	".woff2": "font/woff2",
	".txt":   "text/plain; charset=utf-8",
}

func contentType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := types[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

// Fallback reports whether a request no route takes gets the app's page: a
// GET or HEAD of a browser (Accept: text/html) outside the API's paths.
// The app routes with the URL's hash, so any such path shows the app.
func (c *Console) Fallback(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		!IsAPIPath(r.URL.Path) && strings.Contains(r.Header.Get("Accept"), "text/html")
}

// ServeHTTP answers / (and /index.html) with the app's page, /assets/<file>
// with dist/<file>, /favicon.ico with dist's or nothing (204), and any other
// path with the page when Fallback allows, else 404 in the error contract.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, apierr.Newf(apierr.Validation, "method %s is not allowed on %s (allowed: GET, HEAD)", r.Method, r.URL.Path))
		return
	}
	p := r.URL.Path
	switch {
	case p == "/" || p == "/index.html":
		c.serve(w, r, c.index)
	case p == "/favicon.ico":
		// Browsers ask for it by themselves: without one in the build, an
		// empty answer rather than a 404 the page's console would report.
		if f, ok := c.files["favicon.ico"]; ok {
			c.serve(w, r, f)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusNoContent)
	case strings.HasPrefix(p, "/assets/"):
		name := strings.TrimPrefix(p, "/assets/")
		f, ok := c.files[name]
		if !ok || !fs.ValidPath(name) {
			writeError(w, 0, apierr.Newf(apierr.NotFound, "no such console file: %s", p))
			return
		}
		c.serve(w, r, f)
	case c.Fallback(r):
		c.serve(w, r, c.index)
	default:
		writeError(w, 0, apierr.Newf(apierr.NotFound, "no such endpoint: %s %s (see /api/v1/openapi.json)", r.Method, p))
	}
}

// serve sends f with its ETag; the browser revalidates every time (no-cache:
// a new build is seen at once, an unchanged one costs a 304).
func (c *Console) serve(w http.ResponseWriter, r *http.Request, f *file) {
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.data))
}

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// frame-ancestors 'none' (CSP) already forbids framing; the older header
	// does the same where CSP level 2 is not honoured, so the approve and
	// revoke buttons cannot be clickjacked there either.
	h.Set("X-Frame-Options", "DENY")
}

// writeError writes err in the error contract ({code,message,field}).
func writeError(w http.ResponseWriter, status int, err *apierr.Error) {
	if status == 0 {
		status = err.Code.HTTPStatus()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(err.JSON(), '\n'))
}
