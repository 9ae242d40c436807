package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// TestPerPrincipalTokenOnlyFromTheFlow: a user with a plain key may store
// static headers for themselves, but not an OAuth token: its token_url
// (here a stand-in for cloud metadata or an internal port) is where the
// credential service would send refresh requests on their behalf. A
// principal's OAuth token comes only from the authorization flow, whose
// endpoints are the authorization server's own (checked metadata).
func TestPerPrincipalTokenOnlyFromTheFlow(t *testing.T) {
	t.Parallel()
	var probed atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"from-the-inside","token_type":"Bearer","expires_in":3600}`))
	}))
	t.Cleanup(internal.Close)
	url := testmcp.ServeHTTP(t, "remote", nil, nil)
	e := start(t)
	cfg := remoteConfig("remote", url)
	cfg.Auth.PerPrincipal = true
	cfg.Enabled = true
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e.waitState("remote", model.StateRunning)
	var key model.KeyCreateReply
	e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "mallory", Scopes: []string{model.KeyScopeCall}}).decode(t, &key)

	tok := model.Credentials{OAuth: &model.OAuthToken{AccessToken: "stale", RefreshToken: "r", Header: "Authorization",
		TokenURL: internal.URL + "/latest/meta-data/iam", ExpiresAt: time.Now().Add(-time.Hour)}}
	r := e.doKey(key.Key, "PUT", "/api/v1/me/authorizations/remote", tok)
	if r.status != http.StatusBadRequest || r.contract(t).Field != "oauth" {
		t.Fatalf("PUT an OAuth token with a token_url: %d %s, want 400 on field oauth", r.status, r.body)
	}
	var list rest.AuthorizationsReply
	e.doKey(key.Key, "GET", "/api/v1/me/authorizations", nil).decode(t, &list)
	if len(list.Authorizations) != 1 || list.Authorizations[0].Authorized {
		t.Fatalf("after the refused PUT: %+v", list.Authorizations)
	}
	// A call finds no credentials of the caller: nothing is refreshed.
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r = e.doKey(key.Key, "POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "remote__echo", Params: json.RawMessage(`{"message":"hi"}`)})
		return r.status != http.StatusNotFound, "echo is unknown to the gateway"
	})
	wantNotAuthorized(t, "mallory after the refused PUT", r)
	if n := probed.Load(); n != 0 {
		t.Fatalf("the internal address got %d requests", n)
	}
}
