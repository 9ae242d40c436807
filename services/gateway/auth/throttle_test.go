package auth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// TestFailureThrottleBuckets: a bad secret for a known key id counts against
// that address and key id, anything else against the address; a valid key is
// held back only by its own bucket.
func TestFailureThrottleBuckets(t *testing.T) {
	e := startNATS(t)
	s := e.openStore(t)
	mk := func(name string) model.KeyCreateReply {
		k, err := s.Create(ctx(t), model.KeyCreateRequest{Name: name, Scopes: []string{"call"}})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, b := mk("a"), mk("b")
	// a's id with another (well-formed) secret.
	wrongA := a.Key[:len(a.Key)-4] + "AAAA"
	if wrongA == a.Key {
		wrongA = a.Key[:len(a.Key)-4] + "BBBB"
	}
	unknown := auth.KeyPrefix + "0123456789abcdef_" + strings.Repeat("A", 43)
	h := auth.Middleware(auth.MiddlewareOptions{Store: s, Failures: auth.NewFailureLimiter(3)})(whoami)
	from := func(addr, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/mcp/tools", nil)
		r.RemoteAddr = addr + ":4000"
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	want := func(name string, w *httptest.ResponseRecorder, status int, body string) {
		t.Helper()
		if w.Code != status || !strings.Contains(w.Body.String(), body) {
			t.Fatalf("%s: %d %s, want %d with %q", name, w.Code, w.Body, status, body)
		}
	}

	// Three bad secrets for a's id from one address use up (address, a).
	for range 3 {
		want("wrong secret for a", from("192.0.2.1", wrongA), http.StatusUnauthorized, "UNAUTHORIZED")
	}
	w := from("192.0.2.1", wrongA)
	want("fourth wrong secret for a", w, http.StatusTooManyRequests, "with this key from this address")
	if c := contract(t, w); c.Code != apierr.RateLimited || w.Header().Get("Retry-After") == "" {
		t.Fatalf("throttled: %+v Retry-After %q", c, w.Header().Get("Retry-After"))
	}
	// The valid key itself still passes there: only failures meet the
	// throttle, so whoever knows a's id cannot lock a out.
	want("a itself from there", from("192.0.2.1", a.Key), http.StatusOK, a.ID)
	want("a wrong secret for a once more", from("192.0.2.1", wrongA), http.StatusTooManyRequests, "with this key from this address")
	// Not another key from the same address, nor key a from another address,
	// nor the address's own bucket (a key-less request still gets its 401).
	want("b from the same address", from("192.0.2.1", b.Key), http.StatusOK, b.ID)
	want("a from another address", from("192.0.2.2", a.Key), http.StatusOK, a.ID)
	want("no key from the same address", from("192.0.2.1", ""), http.StatusUnauthorized, "UNAUTHORIZED")

	// Unknown ids, garbage and no key count against the address...
	for _, k := range []string{unknown, "garbage"} {
		want("address failure", from("198.51.100.1", k), http.StatusUnauthorized, "UNAUTHORIZED")
	}
	want("no key", from("198.51.100.1", ""), http.StatusUnauthorized, "UNAUTHORIZED")
	want("unknown id once more", from("198.51.100.1", unknown), http.StatusTooManyRequests, "from this address")
	want("no key once more", from("198.51.100.1", ""), http.StatusTooManyRequests, "from this address")
	// ... and a valid key from that address is not held back by them.
	want("valid key from a throttled address", from("198.51.100.1", b.Key), http.StatusOK, b.ID)
	// Another address is untouched.
	want("unknown id from elsewhere", from("198.51.100.2", unknown), http.StatusUnauthorized, "UNAUTHORIZED")
}
