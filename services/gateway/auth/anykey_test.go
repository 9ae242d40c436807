package auth_test

import (
	"net/http"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// GET /api/v1/me (and the caller's own authorizations) takes any valid key, whatever its scopes; a missing or
// revoked key is still a 401, and the rest of /api stays admin.
func TestAnyKeyScope(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/me":                       auth.ScopeAnyKey,
		"/api/v1/me/x":                     auth.ScopeAdmin,
		"/api/v1/me/authorizations":        auth.ScopeAnyKey,
		"/api/v1/me/authorizations/remote": auth.ScopeAnyKey,
		"/api/v1/meta":                     auth.ScopeAdmin,
		"/api/v1/keys":                     auth.ScopeAdmin,
		"/api/v1/agents":                   auth.ScopeAdmin,
		"/api/v1/keys/ab":                  auth.ScopeAdmin,
	} {
		if got := auth.ScopeForPath(path); got != want {
			t.Errorf("ScopeForPath(%s) = %q, want %q", path, got, want)
		}
	}
	s := startNATS(t).openStore(t)
	keys := map[string]model.KeyCreateReply{}
	for _, scope := range []string{"call", "chat", "admin"} {
		k, err := s.Create(ctx(t), model.KeyCreateRequest{Name: scope + " key", Scopes: []string{scope}})
		if err != nil {
			t.Fatal(err)
		}
		keys[scope] = k
	}
	h := auth.Middleware(auth.MiddlewareOptions{Store: s})(whoami)
	for scope, k := range keys {
		if w := do(t, h, "/api/v1/me", k.Key); w.Code != http.StatusOK || w.Body.String() != k.ID {
			t.Fatalf("/api/v1/me with a %s key: %d %q", scope, w.Code, w.Body)
		}
	}
	if w := do(t, h, "/api/v1/keys", keys["call"].Key); w.Code != http.StatusForbidden {
		t.Fatalf("/api/v1/keys with a call key: %d, want 403", w.Code)
	}
	if w := do(t, h, "/api/v1/me", ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("/api/v1/me without a key: %d, want 401", w.Code)
	}
	if _, err := s.Revoke(ctx(t), keys["chat"].ID); err != nil {
		t.Fatal(err)
	}
	if w := do(t, h, "/api/v1/me", keys["chat"].Key); w.Code != http.StatusUnauthorized || contract(t, w).Code != "UNAUTHORIZED" {
		t.Fatalf("/api/v1/me with a revoked key: %d %s, want 401", w.Code, w.Body)
	}
}
