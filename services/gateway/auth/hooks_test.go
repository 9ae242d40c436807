package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// TestRefusalHooks: the rate limit and the throttle of failed
// authentications each tell their hook of every request they refuse with
// 429, and of nothing else (the gateway counts refusals with them).
func TestRefusalHooks(t *testing.T) {
	var rate, throttle []string
	l := auth.NewLimiter(auth.LimiterOptions{RPS: 0.01, Burst: 1, OnRefuse: func(r *http.Request) { rate = append(rate, r.URL.Path) }})
	limited := l.Middleware(whoami)
	p := &auth.Principal{KeyID: "k1", Scopes: []string{"call"}}
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		r := httptest.NewRequest("GET", "/mcp/tools", nil)
		w := httptest.NewRecorder()
		limited.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
	}
	if len(rate) != 2 {
		t.Errorf("rate limit hook called %d times (%v), want 2", len(rate), rate)
	}

	h := auth.Middleware(auth.MiddlewareOptions{Failures: auth.NewFailureLimiter(2),
		OnThrottle: func(r *http.Request) { throttle = append(throttle, r.URL.Path) }})(whoami)
	for i, want := range []int{http.StatusUnauthorized, http.StatusUnauthorized, http.StatusTooManyRequests} {
		if w := do(t, h, "/mcp/tools", ""); w.Code != want {
			t.Fatalf("attempt %d without a key: %d, want %d", i, w.Code, want)
		}
	}
	if len(throttle) != 1 || len(rate) != 2 {
		t.Errorf("throttle hook called %d times (%v), want 1", len(throttle), throttle)
	}
}

// TestRateBucketPerIssuer: tokens of two issuers naming the same subject are
// two principals, each with its own bucket.
func TestRateBucketPerIssuer(t *testing.T) {
	limited := auth.NewLimiter(auth.LimiterOptions{RPS: 0.01, Burst: 1}).Middleware(whoami)
	tok := func(iss string) *auth.Principal {
		return &auth.Principal{KeyID: auth.OAuthKeyIDPrefix + "alice", Scopes: []string{"call"}, Issuer: iss}
	}
	for i, c := range []struct {
		p    *auth.Principal
		want int
	}{{tok("https://a.example"), http.StatusOK}, {tok("https://b.example"), http.StatusOK}, {tok("https://a.example"), http.StatusTooManyRequests}} {
		r := httptest.NewRequest("GET", "/mcp/tools", nil)
		w := httptest.NewRecorder()
		limited.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), c.p)))
		if w.Code != c.want {
			t.Fatalf("request %d (%s): %d, want %d", i, c.p.Issuer, w.Code, c.want)
		}
	}
}
