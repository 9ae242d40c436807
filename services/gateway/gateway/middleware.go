package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/internal/httpguard"
)

// statusWriter records the status and size of a response for the access
// log. Unwrap lets http.ResponseController reach Flush and the deadlines.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// accessLog logs one line per request: method, path (never the query),
// status, duration, the key id (never the key), the direct peer (remote)
// and, when a trusted proxy named another, the client address (client).
// Probes log at debug.
func accessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, note := auth.WithNote(r.Context())
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		level := slog.LevelInfo
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			level = slog.LevelDebug
		}
		if !log.Enabled(r.Context(), level) {
			return // the attributes below cost ~8 allocations a request
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", sw.status,
			"duration_ms", float64(time.Since(start).Microseconds()) / 1000,
			"bytes", sw.bytes, "key_id", note.KeyID, "remote", r.RemoteAddr}
		if peer, _, _ := net.SplitHostPort(r.RemoteAddr); auth.ClientAddr(r) != peer {
			attrs = append(attrs, "client", auth.ClientAddr(r))
		}
		log.Log(r.Context(), level, "http request", attrs...)
	})
}

// recoverer turns a handler panic into a 500 in the error contract.
func recoverer(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(p))
				auth.WriteError(w, 0, apierr.New(apierr.Internal, "internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// streaming reports whether a request's response may stay open for long
// (the MCP endpoint, the event streams, a chat completion, which bounds its
// own turn): no write deadline for those.
func streaming(r *http.Request) bool {
	p := r.URL.Path
	return p == "/mcp" || p == "/api/v1/events" || p == "/v1/chat/completions" ||
		(strings.HasPrefix(p, "/api/v1/chat/conversations/") && strings.HasSuffix(p, "/events")) ||
		(strings.HasPrefix(p, "/api/v1/tasks/") && strings.HasSuffix(p, "/events"))
}

// bodyDeadline bounds the read of a request's body from the request's
// arrival (BodyTimeout; limits reads it within that), and ends a body the
// handler left unread once it is done. The server has no ReadTimeout (the
// long streams), and net/http reads what is left of an unread body before
// it sends the answer, to keep the connection: a request refused before
// limits read its body (no key, a foreign Host, the rate limit), or whose
// read limits gave up on, whose client announced more than it sent, held
// its connection and goroutine for as long as the client liked, and never
// got its answer. Now the answer goes out at once and the connection closes.
func (g *Gateway) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(g.opts.BodyTimeout))
		body := &endSeen{ReadCloser: r.Body}
		r.Body = body
		next.ServeHTTP(w, r)
		if !body.ended {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// endSeen tells whether a body was read to its end (io.EOF, not an error).
type endSeen struct {
	io.ReadCloser
	ended bool
}

func (b *endSeen) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.ended = true
	}
	return n, err
}

// limits reads the body within MaxBodyBytes (413 over it) and BodyTimeout,
// then gives non-streaming requests a write deadline. Reading the body here,
// once, makes the 413 the same for every route, the MCP endpoint included.
func (g *Gateway) limits(next http.Handler) http.Handler {
	max := g.opts.MaxBodyBytes
	tooBig := func(w http.ResponseWriter) {
		auth.WriteError(w, http.StatusRequestEntityTooLarge,
			apierr.Invalid("body", fmt.Sprintf("the request body is larger than the limit of %d bytes", max)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.ContentLength > max {
			tooBig(w)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			// Within the deadline bodyDeadline set at the request's arrival.
			data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
			// The deadline also covers the connection while the handler
			// runs: clear it, or a long stream would be cut.
			_ = rc.SetReadDeadline(time.Time{})
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					tooBig(w)
					return
				}
				auth.WriteError(w, 0, apierr.Wrap(apierr.Validation, "reading the request body: "+err.Error(), err))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(data))
		}
		if !streaming(r) {
			_ = rc.SetWriteDeadline(time.Now().Add(g.opts.RequestTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// healthz answers 200 while the process serves.
func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
}

// readyTimeout bounds each readiness check.
const readyTimeout = time.Second

// readyz answers 200 when NATS is connected and a runner and a config
// service answer $SRV.PING within a second; otherwise 503 naming what failed.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	checks := map[string]string{"nats": "ok"}
	if !g.nc.IsConnected() {
		checks["nats"] = "not connected (" + g.nc.Status().String() + ")"
	}
	type result struct{ name, msg string }
	services := map[string]string{"runner": "mcpbus-runner", "config": "mcpbus-config"}
	results := make(chan result, len(services))
	for name, svc := range services {
		go func() {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if _, err := g.nc.RequestWithContext(ctx, "$SRV.PING."+svc, nil); err != nil {
				results <- result{name, "no answer to $SRV.PING." + svc + " within " + readyTimeout.String()}
				return
			}
			results <- result{name, "ok"}
		}()
	}
	for range services {
		res := <-results
		checks[res.name] = res.msg
	}
	var failed []string
	for name, msg := range checks {
		if msg != "ok" {
			failed = append(failed, name)
		}
	}
	body := map[string]any{"status": "ready", "checks": checks}
	status := http.StatusOK
	if len(failed) > 0 {
		status = http.StatusServiceUnavailable
		body = map[string]any{"code": apierr.ServiceUnavailable, "message": "not ready: " + strings.Join(slices.Sorted(slices.Values(failed)), ", "), "checks": checks}
	}
	data, _ := json.Marshal(body) // strings only: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// headerOnly records what a handler would answer, without a body.
type headerOnly struct {
	header http.Header
	status int
}

func (h *headerOnly) Header() http.Header         { return h.header }
func (h *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerOnly) WriteHeader(code int)        { h.status = code }

// contractErrors answers requests no route takes (404, or 405 with Allow)
// in the error contract instead of the mux's plain text.
func contractErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &headerOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound, http.StatusMethodNotAllowed:
		default: // a redirect to the clean path: let the mux answer
			mux.ServeHTTP(w, r)
			return
		}
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			auth.WriteError(w, rec.status, apierr.Newf(apierr.Validation, "method %s is not allowed on %s (allowed: %s)",
				r.Method, r.URL.Path, rec.header.Get("Allow")))
			return
		}
		auth.WriteError(w, 0, apierr.Newf(apierr.NotFound, "no such endpoint: %s %s (see /api/v1/openapi.json)", r.Method, r.URL.Path))
	})
}

// hostGuard refuses, on every route, a request that reached a loopback
// listener with a Host that is not the local machine (DNS rebinding: a page
// of another site whose name now resolves to 127.0.0.1). The rule is the
// one go-sdk applies to /mcp and the fast path mirrors (httpguard).
//
// With --no-auth a request is the caller's only credential, and the
// listener need not be loopback to be reached from the user's machine (a
// container's port published on the host's 127.0.0.1, a VM's forwarded
// port): then any listener answers only a loopback Host or the host of
// --gateway-public-url (publicURL).
func hostGuard(noAuth bool, publicURL string, next http.Handler) http.Handler {
	public := ""
	if u, err := url.Parse(publicURL); err == nil && publicURL != "" {
		public = u.Hostname()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if httpguard.ForeignHost(r) {
			auth.WriteError(w, http.StatusForbidden, apierr.Newf(apierr.Unauthorized,
				"Host %q is refused: the gateway listens on a loopback address and answers only localhost, 127.0.0.1 or [::1] (DNS rebinding protection)", r.Host))
			return
		}
		if noAuth && !httpguard.IsLoopback(r.Host) && (public == "" || !strings.EqualFold(hostname(r.Host), public)) {
			auth.WriteError(w, http.StatusForbidden, apierr.Newf(apierr.Unauthorized,
				"Host %q is refused: with --no-auth the gateway answers only localhost, 127.0.0.1, [::1] or the host of --gateway-public-url (DNS rebinding protection)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostname is a Host header without its port (and an IPv6 address
// without its brackets), as url.URL.Hostname gives it.
func hostname(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// mcpGET reports whether r asks for the MCP endpoint's standalone event
// stream (GET /mcp): a read, but the MCP spec has a server validate the
// Origin of every connection to its endpoint (403 when it is present and
// invalid; DNS rebinding and cross-site pages), and the stream carries the
// session's notifications, so writeGuard checks its Origin as a write's.
func mcpGET(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path == "/mcp"
}

// stateChanging reports whether a request may change something: every
// method but GET, HEAD and OPTIONS.
func stateChanging(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// writeGuard refuses state-changing requests a browser page of another site
// could send, auth or not (--no-auth included): one whose Origin is neither
// the gateway's own nor allowed by --cors-origin (403; a cross-site page
// sends Origin, or Sec-Fetch-Site, with every such request), and one with a
// body that is not declared application/json (415: a cross-site form or
// text/plain fetch needs no preflight, JSON does). A request without a body
// may omit Content-Type.
//
// The gateway's own origin needs no --cors-origin: the web console it serves
// writes from there. http.CrossOriginProtection passes Sec-Fetch-Site
// same-origin (every current browser sends it, computed by the browser, so a
// proxy rewriting Host changes nothing) and, from older browsers without it,
// an Origin whose host:port is exactly the request's Host. Nothing looser: a
// sibling port or subdomain (same-site) is refused. That fallback does not
// compare schemes, so http://h and https://h pass alike: behind TLS
// termination the gateway cannot tell which one the browser saw, and the
// only page that gains is a plain-http one on the very same host:port, which
// a current browser does not mark same-origin anyway and which, with auth
// on, still lacks the key (a bearer header, never sent by the browser on
// its own).
// DNS rebinding (a foreign name that resolves to a loopback listener, so
// Origin and Host match) is refused before this, by hostGuard.
// The MCP endpoint's GET stream gets the Origin check too (mcpGET).
func writeGuard(corsOrigins []string, next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	anyOrigin := false
	for _, o := range corsOrigins {
		if o == "*" {
			anyOrigin = true
			continue
		}
		// An origin CORS accepts that is not a plain scheme://host[:port]
		// (a wildcard pattern) may read through CORS but not write: only
		// exact origins are trusted here.
		_ = cop.AddTrustedOrigin(o)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream := mcpGET(r)
		if !stateChanging(r) && !stream {
			next.ServeHTTP(w, r)
			return
		}
		if !anyOrigin {
			check := r
			if stream {
				// CrossOriginProtection passes every GET: checked as the
				// write it is not, for the same rule.
				check = r.WithContext(r.Context())
				check.Method = http.MethodPost
			}
			if err := cop.Check(check); err != nil {
				from := r.Header.Get("Origin")
				if from == "" {
					from = "sec-fetch-site " + r.Header.Get("Sec-Fetch-Site")
				}
				auth.WriteError(w, http.StatusForbidden, apierr.Newf(apierr.Unauthorized,
					"cross-origin request refused: %q may not call the gateway (allow a browser origin with --cors-origin)", from))
				return
			}
		}
		if stream {
			next.ServeHTTP(w, r) // no body: nothing to declare
			return
		}
		ct := r.Header.Get("Content-Type")
		hasBody := r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody // -1: chunked
		if ct != "" || hasBody {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				auth.WriteError(w, http.StatusUnsupportedMediaType, apierr.Invalid("Content-Type",
					fmt.Sprintf("%s %s needs Content-Type: application/json (got %q)", r.Method, r.URL.Path, ct)))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
