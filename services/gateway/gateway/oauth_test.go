package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/jwtissuer"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// oauthResource is the gateway's resource identifier in these tests: any
// URL does, it is what tokens must name as their audience.
const oauthResource = "https://mcp.example.test/mcp"

const oauthMetadataURL = "https://mcp.example.test/.well-known/oauth-protected-resource/mcp"

func issue(t *testing.T, iss *jwtissuer.Issuer, c jwt.Claims) string {
	t.Helper()
	tok, err := iss.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// challenge parses a reply's Bearer challenge (go-sdk's parser, as an MCP
// client reads it).
func challenge(t *testing.T, r reply) map[string]string {
	t.Helper()
	cs, err := oauthex.ParseWWWAuthenticate(r.header.Values("WWW-Authenticate"))
	if err != nil || len(cs) != 1 || cs[0].Scheme != "bearer" {
		t.Fatalf("status %d: WWW-Authenticate %q: %v", r.status, r.header.Values("WWW-Authenticate"), err)
	}
	return cs[0].Params
}

// The gateway accepts access tokens of its issuer beside API keys: on
// /mcp/tools, /mcp/invoke and /mcp (an MCP session), with the scopes and
// tool filter the token's scopes give, and refuses every token that does
// not verify with 401 invalid_token naming its resource metadata.
func TestOAuthAccessTokens(t *testing.T) {
	iss := jwtissuer.Start(t)
	e := runnertest.Start(t, quietRunner())
	runServer(t, e, "alpha", nil)
	h := startGateway(t, e, gateway.Options{AuthFailures: 1000, OAuth: jwtauth.Options{
		Issuers: []string{iss.URL()}, Resource: oauthResource, ScopeMap: []string{"tools=call"}}})
	token := func(scopes ...string) string {
		return issue(t, iss, iss.Claims("alice", oauthResource, scopes...))
	}
	caller := token("mcpbus:call")
	h.waitTool(caller, "alpha__echo")

	t.Run("invoke", func(t *testing.T) {
		status, out := invoke(t, h, caller, map[string]any{"tool_name": "alpha__echo", "params": map[string]any{"message": "by token"}})
		if status != http.StatusOK || !out.Success || !strings.Contains(string(out.Result), "by token") {
			t.Fatalf("%d %+v", status, out)
		}
		// A mapped scope works the same.
		status, out = invoke(t, h, token("tools"), map[string]any{"tool_name": "alpha__echo", "params": map[string]any{"message": "mapped"}})
		if status != http.StatusOK || !out.Success {
			t.Fatalf("mapped scope: %d %+v", status, out)
		}
	})

	t.Run("MCP session", func(t *testing.T) {
		names, cs := mcpTools(t, h, caller)
		if !slices.Contains(names, "alpha__echo") || !slices.Contains(names, "alpha__sleep") {
			t.Fatalf("tools %v", names)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "via mcp"}})
		if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "via mcp" {
			t.Fatalf("MCP call: %+v %v", res, err)
		}
	})

	t.Run("tool scopes filter the tools", func(t *testing.T) {
		narrow := token("mcpbus:call", "mcpbus:tool:alpha__echo")
		names, _ := mcpTools(t, h, narrow)
		if !slices.Equal(names, []string{"alpha__echo"}) {
			t.Fatalf("MCP tools of a narrowed token: %v", names)
		}
		var list struct{ Tools []struct{ Name string } }
		h.do("GET", "/mcp/tools", narrow, nil).decode(t, &list)
		if len(list.Tools) != 1 || list.Tools[0].Name != "alpha__echo" {
			t.Fatalf("/mcp/tools of a narrowed token: %+v", list)
		}
		status, out := invoke(t, h, narrow, map[string]any{"tool_name": "alpha__sleep", "params": map[string]any{}})
		if status != http.StatusNotFound || out.Success {
			t.Fatalf("hidden tool invoked: %d %+v", status, out)
		}
	})

	t.Run("API keys still work", func(t *testing.T) {
		key := h.key(model.KeyCreateRequest{Scopes: []string{"call"}}).Key
		if r := h.do("GET", "/mcp/tools", key, nil); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})

	t.Run("no token", func(t *testing.T) {
		r := h.do("POST", "/mcp", "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"})
		p := challenge(t, r)
		// The challenge names the scope /mcp needs: an MCP client asks for
		// it, and only without it for every scope the metadata lists,
		// mcpbus:admin included (MCP authorization 2025-11-25, scope
		// selection).
		if r.status != http.StatusUnauthorized || p["resource_metadata"] != oauthMetadataURL || p["error"] != "" || p["scope"] != "tools" {
			t.Fatalf("%d %v", r.status, p)
		}
		if !strings.Contains(r.contract(t).Message, "OAuth access token") {
			t.Fatalf("message %q", r.contract(t).Message)
		}
	})

	other := jwtissuer.Start(t)
	expired := iss.Claims("alice", oauthResource, "mcpbus:call")
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour))
	foreignKey := other.Claims("alice", oauthResource, "mcpbus:call")
	foreignKey.Issuer = iss.URL()
	good := strings.Split(caller, ".")
	admin := strings.Split(token("mcpbus:admin"), ".")
	beforeRotation := token("mcpbus:call")
	for name, tok := range map[string]string{
		"expired":        issue(t, iss, expired),
		"wrong audience": issue(t, iss, iss.Claims("alice", "https://elsewhere.example.test/mcp", "mcpbus:call")),
		"wrong issuer":   issue(t, other, other.Claims("alice", oauthResource, "mcpbus:call")),
		"bad signature":  good[0] + "." + admin[1] + "." + good[2],
		"unknown kid":    issue(t, other, foreignKey),
	} {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{"/mcp/tools", "/api/v1/status"} {
				r := h.do("GET", path, tok, nil)
				p := challenge(t, r)
				if r.status != http.StatusUnauthorized || r.contract(t).Code != apierr.Unauthorized ||
					p["error"] != "invalid_token" || p["resource_metadata"] != oauthMetadataURL {
					t.Fatalf("%s: %d %s %v", path, r.status, r.body, p)
				}
			}
			if p := challenge(t, h.do("POST", "/mcp", tok, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"})); p["scope"] != "tools" {
				t.Fatalf("/mcp: challenge %v, want the scope it needs", p)
			}
		})
	}

	t.Run("rotation", func(t *testing.T) {
		if err := iss.Rotate(); err != nil {
			t.Fatal(err)
		}
		if r := h.do("GET", "/mcp/tools", token("mcpbus:call"), nil); r.status != http.StatusOK {
			t.Fatalf("token of the new key: %d %s", r.status, r.body)
		}
		// The retired key's tokens no longer verify once the set is refreshed.
		r := h.do("GET", "/mcp/tools", beforeRotation, nil)
		if r.status != http.StatusUnauthorized || challenge(t, r)["error"] != "invalid_token" {
			t.Fatalf("token of the retired key: %d %s", r.status, r.body)
		}
	})

	t.Run("missing scope", func(t *testing.T) {
		chat := token("mcpbus:chat")
		r := h.do("POST", "/mcp/invoke", chat, map[string]any{"tool_name": "alpha__echo", "params": map[string]any{}})
		p := challenge(t, r)
		if r.status != http.StatusForbidden || p["error"] != "insufficient_scope" || p["scope"] != "tools" ||
			p["resource_metadata"] != oauthMetadataURL {
			t.Fatalf("/mcp/invoke with a chat token: %d %s %v", r.status, r.body, p)
		}
		r = h.do("GET", "/api/v1/status", token("mcpbus:call"), nil)
		if p := challenge(t, r); r.status != http.StatusForbidden || p["error"] != "insufficient_scope" || p["scope"] != "mcpbus:admin" {
			t.Fatalf("admin API with a call token: %d %s %v", r.status, r.body, p)
		}
		r = h.do("POST", "/mcp", token("openid"), map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"})
		if r.status != http.StatusForbidden || challenge(t, r)["error"] != "insufficient_scope" {
			t.Fatalf("/mcp with no gateway scope: %d %s", r.status, r.body)
		}
	})

	// A token its user granted no mcpbus scope (nor a mapped one) reaches
	// nothing, not even the routes any key may use; one with a scope does.
	t.Run("no scope at all", func(t *testing.T) {
		for _, tok := range []string{token("openid", "profile"), token("mcpbus:tool:alpha__*")} {
			for _, path := range []string{"/api/v1/me", "/api/v1/me/authorizations", "/api/v1/approvals"} {
				r := h.do("GET", path, tok, nil)
				p := challenge(t, r)
				if r.status != http.StatusForbidden || r.contract(t).Code != apierr.Unauthorized || p["error"] != "insufficient_scope" ||
					p["scope"] != "tools" || p["resource_metadata"] != oauthMetadataURL {
					t.Errorf("%s with a token of no gateway scope: %d %s %v", path, r.status, r.body, p)
				}
			}
		}
		if r := h.do("GET", "/api/v1/me", token("mcpbus:chat"), nil); r.status != http.StatusOK {
			t.Errorf("/api/v1/me with a chat token: %d %s", r.status, r.body)
		}
	})

	t.Run("an admin token may use the admin API", func(t *testing.T) {
		if r := h.do("GET", "/api/v1/status", token("mcpbus:admin"), nil); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})

	t.Run("protected resource metadata", func(t *testing.T) {
		for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
			r := h.do("GET", path, "", nil)
			var doc oauthex.ProtectedResourceMetadata
			r.decode(t, &doc)
			if r.status != http.StatusOK || doc.Resource != oauthResource || !slices.Equal(doc.AuthorizationServers, []string{iss.URL()}) ||
				!slices.Equal(doc.ScopesSupported, []string{"mcpbus:admin", "mcpbus:call", "mcpbus:chat", "tools"}) ||
				!slices.Equal(doc.BearerMethodsSupported, []string{"header"}) || r.header.Get("Access-Control-Allow-Origin") != "*" {
				t.Fatalf("%s: %d %s %v", path, r.status, r.body, r.header)
			}
		}
	})
}

// mcpTools opens an MCP session with token and lists its tools.
func mcpTools(t *testing.T, h *gw, token string) ([]string, *mcp.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	return names, cs
}

// Per-key rate limits and the throttle of failed authentications apply to
// token principals as to keys.
func TestOAuthLimits(t *testing.T) {
	iss := jwtissuer.Start(t)
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{RateRPS: 0.01, RateBurst: 2, AuthFailures: 2,
		OAuth: jwtauth.Options{Issuers: []string{iss.URL()}, Resource: oauthResource}})
	tok := issue(t, iss, iss.Claims("carol", oauthResource, "mcpbus:call"))
	var statuses []int
	for range 3 {
		statuses = append(statuses, h.do("GET", "/mcp/tools", tok, nil).status)
	}
	if !slices.Equal(statuses, []int{200, 200, 429}) {
		t.Fatalf("statuses over the rate: %v", statuses)
	}
	// Another subject has its own bucket.
	if r := h.do("GET", "/mcp/tools", issue(t, iss, iss.Claims("dave", oauthResource, "mcpbus:call")), nil); r.status != http.StatusOK {
		t.Fatalf("another subject: %d", r.status)
	}
	bad := issue(t, iss, iss.Claims("carol", "https://elsewhere.example.test/mcp", "mcpbus:call"))
	statuses = nil
	for range 3 {
		statuses = append(statuses, h.do("GET", "/mcp/tools", bad, nil).status)
	}
	if !slices.Equal(statuses, []int{401, 401, 429}) {
		t.Fatalf("statuses of failing tokens: %v", statuses)
	}
}

// An issuer that cannot be reached is the gateway's problem, not the
// caller's: 503, which the throttle of failed authentications does not count.
func TestOAuthIssuerDown(t *testing.T) {
	iss := jwtissuer.Start(t)
	tok := issue(t, iss, iss.Claims("erin", oauthResource, "mcpbus:call"))
	iss.Close()
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{AuthFailures: 1,
		OAuth: jwtauth.Options{Issuers: []string{iss.URL()}, Resource: oauthResource, HTTPTimeout: 2 * time.Second}})
	for range 3 {
		r := h.do("GET", "/mcp/tools", tok, nil)
		if r.status != http.StatusServiceUnavailable || r.contract(t).Code != apierr.ServiceUnavailable {
			t.Fatalf("issuer down: %d %s", r.status, r.body)
		}
	}
}

// Without an issuer nothing is served at the metadata path, and the 401
// names no metadata: OAuth clients are told to send an API key instead of
// starting a flow no authorization server would finish.
func TestNoOAuthNoMetadata(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		if r := h.do("GET", path, "", nil); r.status != http.StatusNotFound || r.contract(t).Code != apierr.NotFound {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
	r := h.do("GET", "/mcp/tools", "", nil)
	if p := challenge(t, r); r.status != http.StatusUnauthorized || p["resource_metadata"] != "" || p["realm"] != "mcpbus" {
		t.Fatalf("%d %v", r.status, p)
	}
	// A JWT-shaped bearer is just an unknown API key here.
	if r := h.do("GET", "/mcp/tools", "a.b.c", nil); r.status != http.StatusUnauthorized || challenge(t, r)["error"] != "invalid_token" {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

func TestOAuthSettings(t *testing.T) {
	for name, o := range map[string]gateway.Options{
		"issuer without resource": {OAuth: jwtauth.Options{Issuers: []string{"https://idp.example.com"}}},
		"issuer with no-auth":     {NoAuth: true, OAuth: jwtauth.Options{Issuers: []string{"https://idp.example.com"}, Resource: oauthResource}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
