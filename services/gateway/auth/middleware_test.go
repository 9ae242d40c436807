package auth_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// whoami answers with the principal the middleware put in the context.
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	p := auth.PrincipalFrom(r.Context())
	if p == nil {
		_, _ = w.Write([]byte("nobody"))
		return
	}
	_, _ = w.Write([]byte(p.KeyID))
})

func do(t *testing.T, h http.Handler, path, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func contract(t *testing.T, w *httptest.ResponseRecorder) apierr.Error {
	t.Helper()
	var e apierr.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("body is not the error contract: %q", w.Body.String())
	}
	return e
}

func TestMiddleware(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	admin, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "admin", Scopes: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	caller, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "caller", Scopes: []string{"call"}})
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "gone", Scopes: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx(t), revoked.ID); err != nil {
		t.Fatal(err)
	}
	h := auth.Middleware(auth.MiddlewareOptions{Store: s})(whoami)

	unauthorized := func(name, path, key, wantChallenge string) {
		t.Helper()
		w := do(t, h, path, key)
		want := http.StatusUnauthorized
		if strings.Contains(wantChallenge, "insufficient_scope") {
			want = http.StatusForbidden // authenticated, but lacks the scope
		}
		if w.Code != want {
			t.Fatalf("%s: status %d, want %d: %s", name, w.Code, want, w.Body)
		}
		if c := contract(t, w); c.Code != apierr.Unauthorized {
			t.Fatalf("%s: code %s", name, c.Code)
		}
		if got := w.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") || !strings.Contains(got, wantChallenge) {
			t.Fatalf("%s: WWW-Authenticate %q, want Bearer with %q", name, got, wantChallenge)
		}
	}
	unauthorized("missing key", "/mcp/tools", "", `realm="mcpbus"`)
	unauthorized("garbage key", "/mcp/tools", "not-a-key", `error="invalid_token"`)
	unauthorized("revoked key", "/api/v1/servers", revoked.Key, `error="invalid_token"`)
	unauthorized("call key on admin API", "/api/v1/servers", caller.Key, `error="insufficient_scope", scope="admin"`)

	for _, c := range []struct{ path, key, want string }{
		{"/mcp/tools", caller.Key, caller.ID},
		{"/mcp", caller.Key, caller.ID},
		{"/mcp/invoke", admin.Key, admin.ID}, // admin implies call
		{"/api/v1/servers", admin.Key, admin.ID},
		{"/healthz", "", "nobody"}, // public, no principal
	} {
		w := do(t, h, c.path, c.key)
		if w.Code != http.StatusOK || w.Body.String() != c.want {
			t.Fatalf("%s: %d %q, want 200 %q", c.path, w.Code, w.Body, c.want)
		}
	}
	// The scheme is case-insensitive (RFC 7235); other schemes are not bearer keys.
	r := httptest.NewRequest("GET", "/mcp/tools", nil)
	r.Header.Set("Authorization", "bearer "+caller.Key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("lower-case bearer: %d", w.Code)
	}
	r.Header.Set("Authorization", "Basic "+caller.Key)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("basic scheme: %d, want 401", w.Code)
	}

	// No auth: everyone is anonymous, with every scope.
	open := auth.Middleware(auth.MiddlewareOptions{NoAuth: true})(whoami)
	if w := do(t, open, "/api/v1/servers", ""); w.Code != http.StatusOK || w.Body.String() != "anonymous" {
		t.Fatalf("no-auth: %d %q", w.Code, w.Body)
	}
}

func TestLimiterTokenBucket(t *testing.T) {
	l := auth.NewLimiter(auth.LimiterOptions{RPS: 1, Burst: 3})
	for i := range 3 {
		if ok, _ := l.Allow("a", nil); !ok {
			t.Fatalf("request %d within the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("a", nil)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("4th request: ok=%v wait=%v, want refused with a wait of at most 1s", ok, wait)
	}
	if ok, _ := l.Allow("b", nil); !ok {
		t.Fatal("another key must have its own bucket")
	}
	// A key's own rate overrides the default.
	for i := range 50 {
		if ok, _ := l.Allow("fast", &model.KeyRate{RPS: 1000, Burst: 50}); !ok {
			t.Fatalf("override: request %d refused", i+1)
		}
	}
	if ok, _ := l.Allow("slow", &model.KeyRate{RPS: 0.001, Burst: 1}); !ok {
		t.Fatal("first request of a slow key refused")
	}
	if ok, _ := l.Allow("slow", &model.KeyRate{RPS: 0.001, Burst: 1}); ok {
		t.Fatal("second request of a 0.001 rps key allowed")
	}
}

func TestLimiterMapIsBounded(t *testing.T) {
	l := auth.NewLimiter(auth.LimiterOptions{RPS: 1, Burst: 1, MaxKeys: 5, IdleTTL: time.Hour})
	for i := range 100 {
		l.Allow(fmt.Sprintf("key-%d", i), nil)
		if n := l.Len(); n > 5 {
			t.Fatalf("after %d keys the limiter holds %d buckets, bound 5", i+1, n)
		}
	}
	// The most recent key kept its (empty) bucket: it is not reset by eviction.
	if ok, _ := l.Allow("key-99", nil); ok {
		t.Fatal("the newest key lost its bucket")
	}

	idle := auth.NewLimiter(auth.LimiterOptions{RPS: 1, Burst: 1, IdleTTL: 20 * time.Millisecond})
	idle.Allow("old", nil)
	time.Sleep(30 * time.Millisecond)
	idle.Allow("new", nil)
	if n := idle.Len(); n != 1 {
		t.Fatalf("idle bucket not swept: %d buckets", n)
	}
}

func TestLimiterMiddleware(t *testing.T) {
	l := auth.NewLimiter(auth.LimiterOptions{RPS: 0.5, Burst: 2})
	h := l.Middleware(whoami)
	with := func(p *auth.Principal) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/mcp/tools", nil)
		if p != nil {
			r = r.WithContext(auth.WithPrincipal(r.Context(), p))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	p := &auth.Principal{KeyID: "k1", Scopes: []string{"call"}}
	for range 2 {
		if w := with(p); w.Code != http.StatusOK {
			t.Fatalf("within burst: %d", w.Code)
		}
	}
	w := with(p)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("over the rate: %d, want 429", w.Code)
	}
	if c := contract(t, w); c.Code != apierr.RateLimited {
		t.Fatalf("code %s", c.Code)
	}
	secs, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil || secs < 1 || secs > 2 {
		t.Fatalf("Retry-After %q, want 1 or 2 seconds at 0.5 rps", w.Header().Get("Retry-After"))
	}
	// Requests without a principal (health probes) are never limited.
	for range 10 {
		if w := with(nil); w.Code != http.StatusOK {
			t.Fatalf("unauthenticated path limited: %d", w.Code)
		}
	}
}

// nopWriter is a ResponseWriter that keeps nothing, so that the allocations
// counted are the middleware's own.
type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header       { return w.h }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}

// An authenticated, rate-limited request allocates only the request copy
// that carries the principal and its context: the key's hash and principal
// are made once per record, the bucket keys are not built per request.
func TestMiddlewareAllocationsPerRequest(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	caller, err := s.Create(ctx(t), model.KeyCreateRequest{Name: "caller", Scopes: []string{"call"}})
	if err != nil {
		t.Fatal(err)
	}
	lim := auth.NewLimiter(auth.LimiterOptions{RPS: 1e9, Burst: 1e9})
	reached := 0
	h := auth.Middleware(auth.MiddlewareOptions{Store: s, Failures: auth.NewFailureLimiter(0)})(
		lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ })))
	r := httptest.NewRequest("POST", "/mcp/invoke", nil)
	r.Header.Set("Authorization", "Bearer "+caller.Key)
	w := nopWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) })
	if reached == 0 {
		t.Fatal("the request never reached the handler")
	}
	t.Logf("%.0f allocations per request", allocs)
	if allocs > 2 {
		t.Fatalf("%.0f allocations per authenticated request, want at most 2 (the request copy and its context)", allocs)
	}
}
