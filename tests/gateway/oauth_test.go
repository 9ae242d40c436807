package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/jwtissuer"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/oauthflow"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// remoteConfig is a remote (Streamable HTTP) server at url.
func remoteConfig(name, url string) model.McpConfig {
	return model.McpConfig{Name: name,
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}}
}

// browse does what the user's browser does with the authorization URL: the
// authorization server approves at once and redirects to the gateway's
// callback, whose page is returned.
func browse(t *testing.T, authURL string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: time.Minute}).Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// authorize starts the flow over REST and follows the URL like a browser.
func (e *env) authorize(t *testing.T, slug string) model.OAuthStartReply {
	t.Helper()
	r := e.do("POST", "/api/v1/servers/"+slug+"/auth", nil)
	var out model.OAuthStartReply
	r.decode(t, &out)
	if r.status != http.StatusOK || out.AuthorizationURL == "" || out.Server != slug {
		t.Fatalf("POST auth: %d %s", r.status, r.body)
	}
	if code, page := browse(t, out.AuthorizationURL); code != http.StatusOK || !strings.Contains(page, "authorized") {
		t.Fatalf("callback page: %d %q", code, page)
	}
	return out
}

func (e *env) invokeEcho(t *testing.T, slug, msg string) reply {
	t.Helper()
	return e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: slug + "__echo", Params: json.RawMessage(`{"message":"` + msg + `"}`)})
}

// wantInvokeAuthFailed checks a POST /mcp/invoke answer for the message.
func wantInvokeAuthFailed(t *testing.T, what string, r reply) {
	t.Helper()
	var out rest.InvokeReply
	r.decode(t, &out)
	if r.status != http.StatusUnauthorized || out.Details == nil || out.Details.Code != apierr.Unauthorized || out.Details.Message != model.MsgAuthFailed {
		t.Fatalf("%s: %d %s, want 401 UNAUTHORIZED %q", what, r.status, r.body, model.MsgAuthFailed)
	}
}

func wantAuthFailed(t *testing.T, what string, r reply) {
	t.Helper()
	if r.status != http.StatusUnauthorized {
		t.Fatalf("%s: %d %s, want 401", what, r.status, r.body)
	}
	if e := r.contract(t); e.Code != apierr.Unauthorized || e.Message != model.MsgAuthFailed {
		t.Fatalf("%s: %+v, want UNAUTHORIZED %q", what, e, model.MsgAuthFailed)
	}
}

// TestOAuthRemoteServer: a remote server that wants OAuth refuses mcpbus
// until `auth` (UNAUTHORIZED "Authentication failed. Check your API
// key."); the flow discovers the authorization server from the 401,
// registers a client, gets a code with PKCE, state and resource through the
// gateway's callback, and the server runs with the tokens (sealed in the
// credential service, never in describe). Short-lived tokens are refreshed
// before they expire; a refused refresh puts the server in error with the
// message, and authorizing again brings it back.
func TestOAuthRemoteServer(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{TokenTTL: 4 * time.Second, Scopes: []string{testmcp.Scope, "offline_access"}})
	url := testmcp.ServeProtected(t, "remote", as)
	e := startWith(t, func(o *stack.Options) {
		o.Credential.RefreshBefore = 3 * time.Second
		o.Runner.OAuthEarlyRefresh = 2 * time.Second
	}, gateway.Options{})

	r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig("remote", url)})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	// Before authorizing: the upstream's 401 is the contract's UNAUTHORIZED.
	r = e.do("POST", "/api/v1/servers/remote/enable", nil)
	wantAuthFailed(t, "enable before auth", r)

	out := e.authorize(t, "remote")
	auths := as.Authorizations()
	if len(auths) != 1 || as.Registrations() != 1 {
		t.Fatalf("authorizations %d, registrations %d", len(auths), as.Registrations())
	}
	q := auths[0]
	if q.Get("code_challenge_method") != "S256" || q.Get("resource") != url || q.Get("state") == "" ||
		q.Get("redirect_uri") != e.url+oauthflow.CallbackPath || !sameScopes(q.Get("scope"), testmcp.Scope, "offline_access") {
		t.Fatalf("authorization request %v", q)
	}
	// The state works once.
	if code, page := browse(t, e.url+oauthflow.CallbackPath+"?code=x&state="+q.Get("state")); code != http.StatusBadRequest {
		t.Fatalf("second callback with the same state: %d %q", code, page)
	}
	if !out.ExpiresAt.After(time.Now()) {
		t.Fatalf("expires_at %v", out.ExpiresAt)
	}

	// Tokens are in the credential service, described without values.
	r = e.do("GET", "/api/v1/servers/remote/credentials", nil)
	var d model.CredDescription
	r.decode(t, &d)
	if r.status != http.StatusOK || d.OAuth == nil || !d.OAuth.HasRefreshToken || d.OAuth.Header != model.OAuthHeader {
		t.Fatalf("credentials: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "at-") || strings.Contains(string(r.body), "rt-") {
		t.Fatalf("describe leaks a token: %s", r.body)
	}
	r = e.do("GET", "/api/v1/servers/remote", nil)
	var cfg model.McpConfig
	r.decode(t, &cfg)
	if cfg.AuthType != model.AuthOAuth || strings.Contains(string(r.body), "at-") {
		t.Fatalf("config after auth: %s", r.body)
	}

	// The server was disabled (the failed enable reverted): enable it now.
	if r = e.do("POST", "/api/v1/servers/remote/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable after auth: %d %s", r.status, r.body)
	}
	if r = e.invokeEcho(t, "remote", "hello"); r.status != http.StatusOK || !strings.Contains(string(r.body), "hello") {
		t.Fatalf("call: %d %s", r.status, r.body)
	}

	// Tokens live 4 s: calls over 10 s keep working through refreshes.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		if r = e.invokeEcho(t, "remote", "again"); r.status != http.StatusOK {
			t.Fatalf("call across refreshes: %d %s (refreshes %d)", r.status, r.body, as.Refreshes())
		}
	}
	if as.Refreshes() < 2 {
		t.Fatalf("refreshes %d, want at least 2 in 10 s of 4 s tokens", as.Refreshes())
	}

	// A refused refresh: once the token has expired, calls fail with the
	// message and the server is in error with it.
	as.RefuseRefresh(true)
	deadline := time.Now().Add(15 * time.Second)
	for {
		r = e.invokeEcho(t, "remote", "late")
		if r.status != http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls still succeed long after the refresh was refused")
		}
		time.Sleep(500 * time.Millisecond)
	}
	wantInvokeAuthFailed(t, "call after a refused refresh", r)
	st := e.waitState("remote", model.StateError)
	if st.Code != string(apierr.Unauthorized) || st.Message != model.MsgAuthFailed {
		t.Fatalf("status %+v", st)
	}
	wantInvokeAuthFailed(t, "call in error", e.invokeEcho(t, "remote", "still"))
	// The same over /mcp: a JSON-RPC error with the message.
	s := connectMCP(t, e.url, e.admin)
	if _, err := s.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "remote__echo", Arguments: map[string]any{"message": "mcp"}}); err == nil || !strings.Contains(err.Error(), model.MsgAuthFailed) {
		t.Fatalf("/mcp call in error: %v", err)
	}

	// Re-authorizing restarts the server with new tokens.
	as.RefuseRefresh(false)
	e.authorize(t, "remote")
	e.waitState("remote", model.StateRunning)
	// The gateway learns the server's tools again from the catalog, which
	// the runner publishes as it comes up: a moment after running.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r = e.invokeEcho(t, "remote", "back"); r.status != http.StatusNotFound || time.Now().After(end) {
			break
		}
	}
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "back") {
		t.Fatalf("call after re-authorizing: %d %s", r.status, r.body)
	}
	// Nothing logged a token.
	for _, tok := range []string{"at-", "rt-"} {
		if strings.Contains(e.logs.String(), `"`+tok) || strings.Contains(e.logs.String(), " "+tok) {
			t.Fatalf("a token reached the logs")
		}
	}
}

// TestOAuthFailures: the flow's bad inputs and its ends other than success.
func TestOAuthFailures(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{})
	url := testmcp.ServeProtected(t, "remote", as)
	e := startWith(t, nil, gateway.Options{RemoteOAuth: oauthflow.Options{Timeout: 2 * time.Second}})
	for _, c := range []model.McpConfig{remoteConfig("remote", url), testServerConfig("local")} {
		if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: c}); r.status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", c.Name, r.status, r.body)
		}
	}

	t.Run("static key refused", func(t *testing.T) {
		// Not OAuth: a configured bearer the upstream refuses is the same
		// UNAUTHORIZED (not NETWORK_ERROR "could not connect: … Unauthorized").
		c := remoteConfig("keyed", url)
		c.Transport.SecretHeaders = []string{"Authorization"}
		r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: c,
			Secrets: &model.Credentials{Headers: map[string]string{"Authorization": "Bearer not-a-token"}}})
		if r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		wantAuthFailed(t, "enable with a refused key", e.do("POST", "/api/v1/servers/keyed/enable", nil))
	})
	t.Run("stdio server", func(t *testing.T) {
		r := e.do("POST", "/api/v1/servers/local/auth", nil)
		if r.status != http.StatusBadRequest || r.contract(t).Code != apierr.Validation {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("unknown server", func(t *testing.T) {
		r := e.do("POST", "/api/v1/servers/nope/auth", nil)
		if r.status != http.StatusNotFound {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("unknown state", func(t *testing.T) {
		code, _ := browse(t, e.url+oauthflow.CallbackPath+"?code=x&state=forged")
		if code != http.StatusBadRequest {
			t.Fatalf("forged state: %d", code)
		}
	})
	t.Run("denied", func(t *testing.T) {
		as.Deny(true)
		defer as.Deny(false)
		r := e.do("POST", "/api/v1/servers/remote/auth", nil)
		var out model.OAuthStartReply
		r.decode(t, &out)
		code, page := browse(t, out.AuthorizationURL)
		if code != http.StatusBadRequest || !strings.Contains(page, model.MsgAuthorizeFailed) {
			t.Fatalf("denied: %d %q", code, page)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		// Through the bus, as `mcpbus servers auth` does: the outcome
		// arrives as an event with the product's message.
		nc, err := e.st.ConnectAs("test-operator", access.Operator)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c := client.New(nc, client.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, wait, err := c.AuthorizeServer(ctx, "remote")
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		err = wait(ctx)
		if e := apierr.From(err); e.Message != model.MsgAuthorizeTimeout || time.Since(began) > 10*time.Second {
			t.Fatalf("wait: %v after %s", err, time.Since(began))
		}
		// The URL is dead now.
		if code, _ := browse(t, out.AuthorizationURL); code != http.StatusBadRequest {
			t.Fatalf("callback after the timeout: %d", code)
		}
	})
}

// TestOAuthTwoGateways: behind a load balancer the browser's callback may
// reach another gateway instance than the one that started the flow (and
// holds its PKCE verifier). Started on A, called back on B: B passes the
// code to A over the bus sealed to the flow's key (no message on the bus
// carries the code in clear), A exchanges it, the tokens are stored and the
// server connects; the state then works nowhere again.
func TestOAuthTwoGateways(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{})
	url := testmcp.ServeProtected(t, "remote", as)
	a := startWith(t, nil, gateway.Options{})
	b := runGateway(t, a.st, "test-gateway-b", a.dir, a.logs, gateway.Options{})

	// What crosses the bus between the gateways, as another gateway
	// identity (the only one allowed on those subjects) sees it.
	spy, err := a.st.ConnectAs("test-gateway-spy", access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	relayed := make(chan *nats.Msg, 16)
	sub, err := spy.ChanSubscribe("mcp.v1.oauth.callback.*", relayed)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	if r := a.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig("remote", url)}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	r := a.do("POST", "/api/v1/servers/remote/auth", nil)
	var out model.OAuthStartReply
	r.decode(t, &out)
	if r.status != http.StatusOK || out.AuthorizationURL == "" {
		t.Fatalf("POST auth on A: %d %s", r.status, r.body)
	}
	// The browser: the authorization server redirects to A's callback URL;
	// the load balancer sends it to B.
	back := redirectOf(t, out.AuthorizationURL)
	if !strings.HasPrefix(back, a.url+oauthflow.CallbackPath) {
		t.Fatalf("redirect %q, want A's callback", back)
	}
	onB := b.url + strings.TrimPrefix(back, a.url)
	if code, page := browse(t, onB); code != http.StatusOK || !strings.Contains(page, "authorized with remote") {
		t.Fatalf("callback on B: %d %q", code, page)
	}

	// The code went A-ward sealed: neither it nor the state is in clear.
	select {
	case m := <-relayed:
		code := queryOf(t, back, "code")
		if code == "" || strings.Contains(string(m.Data), code) || strings.Contains(string(m.Data), queryOf(t, back, "state")) {
			t.Fatalf("relayed callback carries the code or state in clear: %s", m.Data)
		}
		var req model.OAuthCallbackRequest
		if err := json.Unmarshal(m.Data, &req); err != nil || len(req.Sealed) == 0 || req.SenderKey == "" {
			t.Fatalf("relayed callback %s: %v", m.Data, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback was relayed over the bus")
	}

	// Tokens stored (seen from B), the server connects.
	r = b.do("GET", "/api/v1/servers/remote/credentials", nil)
	var d model.CredDescription
	r.decode(t, &d)
	if r.status != http.StatusOK || d.OAuth == nil || !d.OAuth.HasRefreshToken {
		t.Fatalf("credentials: %d %s", r.status, r.body)
	}
	if r = b.do("POST", "/api/v1/servers/remote/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable after auth: %d %s", r.status, r.body)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { // B's catalog follows the runner's
		r = b.invokeEcho(t, "remote", "via-b")
		return r.status == http.StatusOK && strings.Contains(string(r.body), "via-b"), string(r.body)
	})
	// The state is spent on every instance.
	for _, e := range []*env{a, b} {
		if code, page := browse(t, e.url+strings.TrimPrefix(back, a.url)); code != http.StatusBadRequest || !strings.Contains(page, "unknown, already used or expired") {
			t.Fatalf("callback again on %s: %d %q", e.url, code, page)
		}
	}
}

// redirectOf follows the authorization URL one step, as the browser does,
// and returns where the authorization server sends it back to.
func redirectOf(t *testing.T, authURL string) string {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") == "" {
		t.Fatalf("authorization endpoint: %d without a redirect", resp.StatusCode)
	}
	return resp.Header.Get("Location")
}

func queryOf(t *testing.T, raw, name string) string {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get(name)
}

// TestOAuthConfidentialClient: an authorization server without dynamic
// registration and a confidential client registered there. The config
// names the client id; its secret is a credential of its own record
// (model.OAuthClientCredentialID, as `mcpbus cred set <server>
// --oauth-client-secret` stores it), read by the gateway on
// cred.oauthclient and sent to the token endpoint the way the server's
// metadata allows (client_secret_post only here), for the code exchange and
// for the credential service's refreshes. A wrong secret fails with a
// message naming the client; a secret never shows in describe or logs.
func TestOAuthConfidentialClient(t *testing.T) {
	t.Parallel()
	const clientID, secret = "mcpbus-confidential", "right-client-secret"
	as := oauthtest.Start(t, oauthtest.Options{NoRegistration: true, TokenTTL: 4 * time.Second,
		Clients: map[string]string{clientID: secret}, AuthMethods: []string{"client_secret_post"}})
	url := testmcp.ServeProtected(t, "remote", as)
	e := startWith(t, func(o *stack.Options) {
		o.Credential.RefreshBefore = 3 * time.Second
		o.Runner.OAuthEarlyRefresh = 2 * time.Second
	}, gateway.Options{})
	c := remoteConfig("remote", url)
	c.Transport.OAuth = &model.TransportOAuth{ClientID: clientID}
	r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: c})
	var cfg model.McpConfig
	r.decode(t, &cfg)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	nc, err := e.st.ConnectAs("test-operator", access.Operator)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	setSecret := func(v string) {
		t.Helper()
		if _, err := credclient.New(nc, "").Set(ctxT(t, 10*time.Second), model.CredSetRequest{ServerID: model.OAuthClientCredentialID(cfg.ID), Kind: model.CredOAuthClient,
			Credentials: model.Credentials{Env: map[string]string{model.OAuthClientSecretName: v}}}); err != nil {
			t.Fatal(err)
		}
	}

	// Without the secret, the client is public: the token endpoint refuses it.
	r = e.do("POST", "/api/v1/servers/remote/auth", nil)
	var out model.OAuthStartReply
	r.decode(t, &out)
	if code, page := browse(t, out.AuthorizationURL); code != http.StatusBadRequest || !strings.Contains(page, oauthflow.MsgClientRefused) {
		t.Fatalf("no secret: %d %q", code, page)
	}
	// A wrong secret: the same clear error.
	setSecret("wrong-client-secret")
	r = e.do("POST", "/api/v1/servers/remote/auth", nil)
	r.decode(t, &out)
	if code, page := browse(t, out.AuthorizationURL); code != http.StatusBadRequest || !strings.Contains(page, oauthflow.MsgClientRefused) {
		t.Fatalf("wrong secret: %d %q", code, page)
	}
	// The right one.
	setSecret(secret)
	e.authorize(t, "remote")
	if got := as.SecretAuth(); !slices.Contains(got, "authorization_code client_secret_post") {
		t.Fatalf("client authentication %v, want the code exchanged with client_secret_post", got)
	}
	if as.Registrations() != 0 {
		t.Fatalf("%d dynamic registrations", as.Registrations())
	}
	if r = e.do("POST", "/api/v1/servers/remote/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable after auth: %d %s", r.status, r.body)
	}
	// The gateway's catalog follows the runner's.
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r = e.invokeEcho(t, "remote", "first")
		return r.status == http.StatusOK, string(r.body)
	})
	// Tokens live 4 s: the credential service refreshes them with the secret.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		if r = e.invokeEcho(t, "remote", "confidential"); r.status != http.StatusOK || !strings.Contains(string(r.body), "confidential") {
			t.Fatalf("call: %d %s (refreshes %d)", r.status, r.body, as.Refreshes())
		}
	}
	if as.Refreshes() < 1 {
		t.Fatalf("refreshes %d, want at least 1", as.Refreshes())
	}
	refreshed := false
	for _, a := range as.SecretAuth() {
		refreshed = refreshed || strings.HasPrefix(a, "refresh_token ")
	}
	if !refreshed {
		t.Fatalf("client authentication %v: no refresh authenticated with the secret", as.SecretAuth())
	}
	r = e.do("GET", "/api/v1/servers/remote/credentials", nil)
	if r.status != http.StatusOK || strings.Contains(string(r.body), secret) {
		t.Fatalf("credentials: %d %s", r.status, r.body)
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Fatal("the client secret reached the logs")
	}
	// Deleting the server deletes its client secret too.
	if r = e.do("DELETE", "/api/v1/servers/remote", nil); r.status != http.StatusOK && r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	d, err := credclient.New(nc, "").Describe(ctxT(t, 10*time.Second), model.CredDescribeRequest{ServerID: model.OAuthClientCredentialID(cfg.ID), Kind: model.CredOAuthClient})
	if err != nil || len(d.Env) != 0 {
		t.Fatalf("client secret record after delete: %+v %v", d, err)
	}
}

// sameScopes reports whether the space-separated scope parameter holds
// exactly want, in any order: a scope is a set (RFC 6749 §3.3), and the
// order of the scopes the flow gathers was seen to vary between runs.
func sameScopes(scope string, want ...string) bool {
	got := strings.Fields(scope)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// TestOAuthFlowEndsWithItsKey: revoking a key cancels the authorization
// flows it started. The callback needs no key, so an admin key revoked
// mid-flow (a leaked key, a leaver) could otherwise still make an upstream
// account of its holder's the server's own, which every caller's calls
// then use.
func TestOAuthFlowEndsWithItsKey(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{})
	const slug = "revoked-starter"
	e := startWith(t, nil, gateway.Options{RemoteOAuth: oauthflow.Options{Timeout: 30 * time.Second}})
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig(slug, testmcp.ServeProtected(t, slug, as))}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var leaving model.KeyCreateReply
	if r := e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "leaving", Scopes: []string{model.KeyScopeAdmin}}); r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("create key: %d %s", r.status, r.body)
	} else {
		r.decode(t, &leaving)
	}
	outcome, err := e.st.Conn.SubscribeSync("mcp.v1.events.oauth." + slug)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outcome.Unsubscribe() })
	var out model.OAuthStartReply
	if r := e.doKey(leaving.Key, "POST", "/api/v1/servers/"+slug+"/auth", nil); r.status != http.StatusOK {
		t.Fatalf("start: %d %s", r.status, r.body)
	} else {
		r.decode(t, &out)
	}
	if r := e.do("DELETE", "/api/v1/keys/"+leaving.ID, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	var ev model.OAuthEvent
	if m, err := outcome.NextMsg(10 * time.Second); err != nil {
		t.Errorf("no outcome of the flow within 10 s of its key's revocation: %v", err)
	} else if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Type != model.OAuthFailed {
		t.Errorf("outcome %s, want failed", m.Data)
	}
	if code, page := browse(t, out.AuthorizationURL); code == http.StatusOK {
		t.Fatalf("the revoked key's authorization completed: %d %q", code, page)
	}
	var d model.CredDescription
	if e.do("GET", "/api/v1/servers/"+slug+"/credentials", nil).decode(t, &d); d.OAuth != nil {
		t.Fatalf("the server holds the revoked key's tokens: %+v", d.OAuth)
	}
}

// TestOAuthFlowEndsWithItsTokens: revoking a subject's access tokens
// cancels the authorization flows they started, as revoking a key does.
func TestOAuthFlowEndsWithItsTokens(t *testing.T) {
	t.Parallel()
	const resource = "https://mcp.example.test/mcp"
	iss := jwtissuer.Start(t)
	as := oauthtest.Start(t, oauthtest.Options{})
	const slug = "revoked-token-starter"
	e := startWith(t, nil, gateway.Options{OAuth: jwtauth.Options{Issuers: []string{iss.URL()}, Resource: resource},
		RemoteOAuth: oauthflow.Options{Timeout: 30 * time.Second}})
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig(slug, testmcp.ServeProtected(t, slug, as))}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	token, err := iss.Token("mallory", resource, "mcpbus:admin")
	if err != nil {
		t.Fatal(err)
	}
	outcome, err := e.st.Conn.SubscribeSync("mcp.v1.events.oauth." + slug)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outcome.Unsubscribe() })
	var out model.OAuthStartReply
	if r := e.doKey(token, "POST", "/api/v1/servers/"+slug+"/auth", nil); r.status != http.StatusOK {
		t.Fatalf("start: %d %s", r.status, r.body)
	} else {
		r.decode(t, &out)
	}
	if r := e.do("POST", "/api/v1/tokens/revoke", model.TokenRevokeRequest{Sub: "mallory", Iss: iss.URL()}); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	var ev model.OAuthEvent
	if m, err := outcome.NextMsg(10 * time.Second); err != nil {
		t.Errorf("no outcome of the flow within 10 s of its tokens' revocation: %v", err)
	} else if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Type != model.OAuthFailed {
		t.Errorf("outcome %s, want failed", m.Data)
	}
	if code, page := browse(t, out.AuthorizationURL); code == http.StatusOK {
		t.Fatalf("the revoked tokens' authorization completed: %d %q", code, page)
	}
}
