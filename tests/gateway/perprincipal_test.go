package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/oauthflow"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// busTap records every message on the bus (subject, data, headers).
type busTap struct {
	mu   sync.Mutex
	seen [][]byte
}

// tapBus needs a stack with InsecureBus: no identity may read everything.
func tapBus(t *testing.T, e *env) *busTap {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(e.st.NATS.Server))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tap := &busTap{}
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		h, _ := json.Marshal(m.Header)
		tap.mu.Lock()
		tap.seen = append(tap.seen, append(append([]byte(m.Subject+" "), m.Data...), h...))
		tap.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return tap
}

// carries reports whether any message held s.
func (b *busTap) carries(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.seen {
		if bytes.Contains(m, []byte(s)) {
			return true
		}
	}
	return false
}

// dialClient connects c to the gateway's /mcp with key, at protocol version.
func dialClient(t *testing.T, c *mcp.Client, baseURL, key, version string) *mcp.ClientSession {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: baseURL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &authTransport{key: key, base: http.DefaultTransport}}}
	cs, err := c.Connect(ctxT(t, 30*time.Second), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// whoami calls the protected server's whoami tool with key over
// /mcp/invoke: the user whose token the upstream saw, or the failed reply.
func (e *env) whoami(t *testing.T, key string) (string, reply) {
	t.Helper()
	r := e.doKey(key, "POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "remote__whoami", Params: json.RawMessage(`{}`)})
	if r.status != http.StatusOK {
		return "", r
	}
	var out struct {
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	r.decode(t, &out)
	if len(out.Result.Content) != 1 {
		t.Fatalf("whoami: %s", r.body)
	}
	return out.Result.Content[0].Text, r
}

// wantNotAuthorized checks a call refused for want of the caller's own
// credentials: 401 UNAUTHORIZED saying how to authorize.
func wantNotAuthorized(t *testing.T, what string, r reply) {
	t.Helper()
	var out rest.InvokeReply
	r.decode(t, &out)
	if r.status != http.StatusUnauthorized || out.Details == nil || out.Details.Code != apierr.Unauthorized ||
		!strings.Contains(out.Details.Message, model.MsgNotAuthorized+"remote") || !strings.Contains(out.Details.Message, "/api/v1/me/authorizations/remote") {
		t.Fatalf("%s: %d %s, want 401 UNAUTHORIZED telling how to authorize", what, r.status, r.body)
	}
}

// authorizeAs runs the caller's own OAuth flow as user (the "browser"
// names who approves).
func (e *env) authorizeAs(t *testing.T, key, user string) {
	t.Helper()
	r := e.doKey(key, "POST", "/api/v1/me/authorizations/remote", nil)
	var out model.OAuthStartReply
	r.decode(t, &out)
	if r.status != http.StatusOK || out.AuthorizationURL == "" || out.Principal == "" {
		t.Fatalf("POST /api/v1/me/authorizations/remote: %d %s", r.status, r.body)
	}
	if code, page := authorizeLink(t, out.AuthorizationURL, key, user); code != http.StatusOK || !strings.Contains(page, "authorized") {
		t.Fatalf("callback page: %d %q", code, page)
	}
}

// perPrincipalRemote adds "remote" at url with auth.per_principal, the
// operator's own authorization serving its start, and makes two call keys.
func (e *env) perPrincipalRemote(t *testing.T, url string) (keyA, keyB model.KeyCreateReply) {
	t.Helper()
	cfg := remoteConfig("remote", url)
	cfg.Auth.PerPrincipal = true
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e.authorize(t, "remote")
	if r := e.do("POST", "/api/v1/servers/remote/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	e.waitState("remote", model.StateRunning)
	for _, k := range []*model.KeyCreateReply{&keyA, &keyB} {
		r := e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "user", Scopes: []string{model.KeyScopeCall}})
		if r.decode(t, k); r.status != http.StatusCreated || k.Key == "" {
			t.Fatalf("create key: %d %s", r.status, r.body)
		}
	}
	return keyA, keyB
}

// TestPerPrincipalOAuth: a remote server with auth.per_principal. Each key
// authorizes on its own; each call carries the caller's own token (the
// upstream names the user), refreshed per principal; a caller without one
// is UNAUTHORIZED with how to authorize, never served with another's;
// revoking one leaves the other working; no token crosses the bus in clear.
func TestPerPrincipalOAuth(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{TokenTTL: 4 * time.Second, Scopes: []string{testmcp.Scope, "offline_access"}})
	url := testmcp.ServeProtected(t, "remote", as)
	e := startWith(t, func(o *stack.Options) {
		o.InsecureBus = true // for the tap
		o.Credential.RefreshBefore = 3 * time.Second
		o.Runner.OAuthEarlyRefresh = 2 * time.Second
	}, gateway.Options{})
	tap := tapBus(t, e)

	keyA, keyB := e.perPrincipalRemote(t, url)
	// Nobody but the operator is authorized: every key is refused, the
	// admin's too, and none gets the operator's token.
	for name, key := range map[string]string{"A": keyA.Key, "B": keyB.Key, "admin": e.admin} {
		var r reply
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) { // the catalog reaches the gateway
			_, r = e.whoami(t, key)
			return r.status != http.StatusNotFound, "whoami is unknown to the gateway"
		})
		wantNotAuthorized(t, name+" before authorizing", r)
	}

	e.authorizeAs(t, keyA.Key, "alice")
	if who, r := e.whoami(t, keyA.Key); who != "alice" {
		t.Fatalf("A's call: %q %d %s", who, r.status, r.body)
	}
	_, r := e.whoami(t, keyB.Key)
	wantNotAuthorized(t, "B while only A is authorized", r)
	if !strings.Contains(string(r.body), "Open "+e.url+oauthflow.ContinuePath+"remote/") {
		t.Fatalf("B's refusal over REST has no authorization URL: %s", r.body)
	}

	// Over /mcp the prompt comes in the form the client declared. A
	// 2025-11-25 session with URL elicitation gets -32042 with the URL, and
	// notifications/elicitation/complete once B has approved.
	completed := make(chan string, 1)
	urlClient := mcp.NewClient(&mcp.Implementation{Name: "url-elicitation", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			completed <- r.Params.ElicitationID
		},
	})
	cs := dialClient(t, urlClient, e.url, keyB.Key, "2025-11-25")
	_, err := cs.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "remote__whoami", Arguments: map[string]any{}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != mcp.CodeURLElicitationRequired {
		t.Fatalf("session call before authorizing: %v, want URLElicitationRequired", err)
	}
	var data struct {
		Elicitations []mcp.ElicitParams `json:"elicitations"`
	}
	if json.Unmarshal(rpcErr.Data, &data) != nil || len(data.Elicitations) != 1 || data.Elicitations[0].Mode != "url" ||
		!continueLink.MatchString(data.Elicitations[0].URL) || data.Elicitations[0].ElicitationID == "" {
		t.Fatalf("elicitation data %s", rpcErr.Data)
	}
	if code, page := authorizeLink(t, data.Elicitations[0].URL, keyB.Key, "bob"); code != http.StatusOK {
		t.Fatalf("callback: %d %q", code, page)
	}
	select {
	case id := <-completed:
		if id != data.Elicitations[0].ElicitationID {
			t.Fatalf("completed %q, want %q", id, data.Elicitations[0].ElicitationID)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no notifications/elicitation/complete after the authorization")
	}
	if res, err := cs.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "remote__whoami", Arguments: map[string]any{}}); err != nil || res.IsError || textOf(res) != "bob" {
		t.Fatalf("session call after authorizing: %v %+v", err, res)
	}
	// Tokens live 4 s: over 10 s each caller keeps their own through refreshes.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		for key, want := range map[string]string{keyA.Key: "alice", keyB.Key: "bob"} {
			if who, r := e.whoami(t, key); who != want {
				t.Fatalf("call as %s: %q %d %s (refreshes %d)", want, who, r.status, r.body, as.Refreshes())
			}
		}
	}
	if as.Refreshes() < 4 {
		t.Fatalf("refreshes %d, want at least 2 per principal in 10 s of 4 s tokens", as.Refreshes())
	}

	// Each sees their own authorization only, without values.
	r = e.doKey(keyB.Key, "GET", "/api/v1/me/authorizations", nil)
	var list rest.AuthorizationsReply
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Authorizations) != 1 || !list.Authorizations[0].Authorized ||
		list.Authorizations[0].Principal != "key:"+keyB.ID || strings.Contains(string(r.body), "at-") {
		t.Fatalf("B's authorizations: %d %s", r.status, r.body)
	}

	// A revokes theirs: A is refused at once, B goes on.
	if r = e.doKey(keyA.Key, "DELETE", "/api/v1/me/authorizations/remote", nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	_, r = e.whoami(t, keyA.Key)
	wantNotAuthorized(t, "A after revoking", r)
	if who, r := e.whoami(t, keyB.Key); who != "bob" {
		t.Fatalf("B after A revoked: %q %d %s", who, r.status, r.body)
	}
	r = e.doKey(keyA.Key, "GET", "/api/v1/me/authorizations", nil)
	if r.decode(t, &list); len(list.Authorizations) != 1 || list.Authorizations[0].Authorized {
		t.Fatalf("A's authorizations after revoking: %s", r.body)
	}

	// A 2026-07-28 client that declared no elicitation gets a tool error
	// holding the URL (the fast path's answer), and is served once A approved.
	modern := connectMCPAt(t, e.url, keyA.Key, "2026-07-28")
	res, err := modern.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "remote__whoami", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("modern call before authorizing: %v", err)
	}
	link := regexp.MustCompile(`open (http\S+) `).FindStringSubmatch(textOf(res))
	if !res.IsError || link == nil || !strings.Contains(textOf(res), model.MsgNotAuthorized) {
		t.Fatalf("modern call before authorizing: %v %+v", err, res)
	}
	// Calling again before approving hands out the same URL (the first stays good).
	again, err := modern.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "remote__whoami", Arguments: map[string]any{}})
	if err != nil || !strings.Contains(textOf(again), link[1]) {
		t.Fatalf("modern call again before authorizing: %v %+v, want the same URL %s", err, again, link[1])
	}
	if code, page := authorizeLink(t, link[1], keyA.Key, "alice"); code != http.StatusOK {
		t.Fatalf("callback: %d %q", code, page)
	}
	if res, err = modern.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "remote__whoami", Arguments: map[string]any{}}); err != nil || res.IsError || textOf(res) != "alice" {
		t.Fatalf("modern call after authorizing: %v %+v", err, res)
	}

	// The operator authorizes for a principal (the CLI's
	// `mcpbus servers auth remote --principal key:<A>`): A is back.
	out, wait, err := e.st.Client.AuthorizeServerFor(ctxT(t, 30*time.Second), "remote", "key:"+keyA.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow != "" || !strings.HasPrefix(out.AuthorizationURL, as.URL) {
		t.Fatalf("the operator's flow for A: %+v, want the provider's URL (bound by state: the operator hands it over)", out)
	}
	if code, page := browse(t, out.AuthorizationURL+"&"+oauthtest.UserParam+"=alice-via-operator"); code != http.StatusOK {
		t.Fatalf("callback: %d %q", code, page)
	}
	if err := wait(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if who, r := e.whoami(t, keyA.Key); who != "alice-via-operator" {
		t.Fatalf("A after the operator authorized them: %q %d %s", who, r.status, r.body)
	}

	// Settings other than per_principal cannot take a principal's record.
	r = e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: remoteConfig("shared", url)})
	if r.status != http.StatusCreated {
		t.Fatalf("create shared: %d %s", r.status, r.body)
	}
	if r = e.doKey(keyA.Key, "POST", "/api/v1/me/authorizations/shared", nil); r.status != http.StatusBadRequest || r.contract(t).Field != "auth.per_principal" {
		t.Fatalf("authorizing a shared server as a principal: %d %s", r.status, r.body)
	}

	// No token crossed the bus in clear, nor reached the logs.
	for _, tok := range []string{`"at-`, `"rt-`, "Bearer at-"} {
		if tap.carries(tok) {
			t.Fatalf("a token crossed the bus in clear (%s)", tok)
		}
		if strings.Contains(e.logs.String(), tok) {
			t.Fatalf("a token reached the logs (%s)", tok)
		}
	}
}

// TestPerPrincipalStaticSecrets: header secrets per principal (an API key
// per user): each caller's calls carry their own header on their own
// upstream session; without one a caller is refused.
func TestPerPrincipalStaticSecrets(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]map[string]bool{} // upstream session id → user keys seen on it
	url := testmcp.ServeHTTP(t, "remote", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
				mu.Lock()
				if seen[sid] == nil {
					seen[sid] = map[string]bool{}
				}
				seen[sid][r.Header.Get("X-User-Key")] = true
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	e := start(t)
	cfg := remoteConfig("remote", url)
	cfg.Auth.PerPrincipal = true
	cfg.Enabled = true
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e.waitState("remote", model.StateRunning)
	var keyA, keyB model.KeyCreateReply
	for _, k := range []*model.KeyCreateReply{&keyA, &keyB} {
		r := e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "user", Scopes: []string{model.KeyScopeCall}})
		r.decode(t, k)
	}
	echo := func(key string) reply {
		return e.doKey(key, "POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "remote__echo", Params: json.RawMessage(`{"message":"hi"}`)})
	}
	var r reply
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r = echo(keyA.Key)
		return r.status != http.StatusNotFound, "echo is unknown to the gateway"
	})
	wantNotAuthorized(t, "A without a secret", r)

	for key, val := range map[string]string{keyA.Key: "secret-of-a-123", keyB.Key: "secret-of-b-456"} {
		r = e.doKey(key, "PUT", "/api/v1/me/authorizations/remote", model.Credentials{Headers: map[string]string{"X-User-Key": val}})
		if r.status != http.StatusOK || strings.Contains(string(r.body), val) {
			t.Fatalf("PUT own secret: %d %s", r.status, r.body)
		}
	}
	// Any key writes its own record: a bounded one.
	many := map[string]string{}
	for i := range model.MaxPrincipalHeaders + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "value-long-enough"
	}
	if r = e.doKey(keyA.Key, "PUT", "/api/v1/me/authorizations/remote", model.Credentials{Headers: many}); r.status != http.StatusBadRequest {
		t.Fatalf("PUT %d headers: %d %s", len(many), r.status, r.body)
	}
	// Environment variables mean nothing to a remote server: refused.
	if r = e.doKey(keyA.Key, "PUT", "/api/v1/me/authorizations/remote", model.Credentials{Env: map[string]string{"X": "y"}}); r.status != http.StatusBadRequest {
		t.Fatalf("PUT env: %d %s", r.status, r.body)
	}
	for _, key := range []string{keyA.Key, keyB.Key, keyA.Key} {
		if r = echo(key); r.status != http.StatusOK {
			t.Fatalf("call with own secret: %d %s", r.status, r.body)
		}
	}
	// A key whose tool filter allows nothing of the server sees no
	// authorization of it and may not store one.
	var other model.KeyCreateReply
	e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "elsewhere", Scopes: []string{model.KeyScopeCall},
		Tools: model.ToolFilter{Allow: []string{"github__*"}}}).decode(t, &other)
	var list rest.AuthorizationsReply
	r = e.doKey(other.Key, "GET", "/api/v1/me/authorizations", nil)
	if r.decode(t, &list); r.status != http.StatusOK || len(list.Authorizations) != 0 {
		t.Fatalf("a filtered key's authorizations: %d %s", r.status, r.body)
	}
	for _, method := range []string{"PUT", "POST", "DELETE"} {
		if r = e.doKey(other.Key, method, "/api/v1/me/authorizations/remote", model.Credentials{Headers: map[string]string{"X-User-Key": "x"}}); r.status != http.StatusNotFound {
			t.Fatalf("%s by a key that may call no tool of remote: %d %s", method, r.status, r.body)
		}
	}
	r = e.doKey(keyA.Key, "GET", "/api/v1/me/authorizations", nil)
	if r.decode(t, &list); len(list.Authorizations) != 1 {
		t.Fatalf("an unfiltered key's authorizations: %d %s", r.status, r.body)
	}

	// Deleting the server removes every principal's own record of it (their
	// ids are hashes of the server and the principal), not only the
	// server's.
	var stored model.McpConfig
	e.do("GET", "/api/v1/servers/remote", nil).decode(t, &stored)
	creds := credclient.New(e.st.Conn, "")
	for _, k := range []model.KeyCreateReply{keyA, keyB} {
		d, err := creds.Describe(ctxT(t, 10*time.Second), model.CredDescribeRequest{ServerID: model.PrincipalCredentialID(stored.ID, principal.Key(k.ID, false, model.ToolFilter{}).ID), Kind: model.CredPrincipal})
		if err != nil || len(d.Headers) != 1 {
			t.Fatalf("%s's record before the delete: %+v, %v", k.ID, d, err)
		}
	}
	if r = e.do("DELETE", "/api/v1/servers/remote", nil); r.status != http.StatusOK && r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	for _, k := range []model.KeyCreateReply{keyA, keyB} {
		d, err := creds.Describe(ctxT(t, 10*time.Second), model.CredDescribeRequest{ServerID: model.PrincipalCredentialID(stored.ID, principal.Key(k.ID, false, model.ToolFilter{}).ID), Kind: model.CredPrincipal})
		if err != nil || len(d.Headers) != 0 || !d.UpdatedAt.IsZero() {
			t.Fatalf("%s's record after the server's delete: %+v, %v", k.ID, d, err)
		}
	}

	// Every upstream session carried exactly one user's key.
	mu.Lock()
	defer mu.Unlock()
	users := map[string]bool{}
	for sid, keys := range seen {
		if len(keys) != 1 {
			t.Fatalf("upstream session %s carried %v: sessions are shared between principals", sid, keys)
		}
		for k := range keys {
			users[k] = true
		}
	}
	if !users["secret-of-a-123"] || !users["secret-of-b-456"] {
		t.Fatalf("upstream sessions saw %v, want each user's key", users)
	}
}

// TestPerPrincipalFlowBoundToStarter: a per-principal flow completes only
// in the browser of the principal who started it. B hands A the link: A,
// signed in as themselves, cannot continue it; B hands A the provider's
// URL after continuing: A's approval comes back without B's cookie and is
// refused, so A's upstream account never becomes B's. B's own browser
// then completes it.
func TestPerPrincipalFlowBoundToStarter(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{Scopes: []string{testmcp.Scope, "offline_access"}})
	url := testmcp.ServeProtected(t, "remote", as)
	e := startWith(t, nil, gateway.Options{})
	keyA, keyB := e.perPrincipalRemote(t, url)
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		_, r := e.whoami(t, keyB.Key)
		return r.status != http.StatusNotFound, "whoami is unknown to the gateway"
	})

	r := e.doKey(keyB.Key, "POST", "/api/v1/me/authorizations/remote", nil)
	var out model.OAuthStartReply
	if r.decode(t, &out); r.status != http.StatusOK || out.Flow == "" || !continueLink.MatchString(out.AuthorizationURL) ||
		strings.Contains(string(r.body), as.URL) {
		t.Fatalf("B's start: %d %s, want the console's link and not the provider's", r.status, r.body)
	}

	// A opens B's link signed in as A.
	victim := newBrowser(t)
	if u, code, body := victim.continueFlow(out.AuthorizationURL, keyA.Key); u != "" || code != http.StatusUnauthorized || !strings.Contains(body, "started by another user") {
		t.Fatalf("A continuing B's flow: %d %s %q", code, body, u)
	}
	// B continues, and hands A the provider's URL.
	attacker := newBrowser(t)
	authURL, code, body := attacker.continueFlow(out.AuthorizationURL, keyB.Key)
	if authURL == "" || !strings.HasPrefix(authURL, as.URL) {
		t.Fatalf("B continuing their own flow: %d %s", code, body)
	}
	if code, page := victim.approve(authURL, "alice"); code != http.StatusBadRequest || !strings.Contains(page, "did not continue") {
		t.Fatalf("A approving B's provider URL: %d %q, want 400", code, page)
	}
	if code, page := browse(t, authURL+"&"+oauthtest.UserParam+"=alice"); code != http.StatusBadRequest || !strings.Contains(page, "did not continue") {
		t.Fatalf("a browser without cookies: %d %q, want 400", code, page)
	}
	_, r = e.whoami(t, keyB.Key)
	wantNotAuthorized(t, "B after A approved B's URL", r)

	// B's own browser completes the same flow.
	if code, page := attacker.approve(authURL, "bob"); code != http.StatusOK || !strings.Contains(page, "authorized") {
		t.Fatalf("B approving in their own browser: %d %q", code, page)
	}
	if who, r := e.whoami(t, keyB.Key); who != "bob" {
		t.Fatalf("B after authorizing: %q %d %s", who, r.status, r.body)
	}
	_, r = e.whoami(t, keyA.Key)
	wantNotAuthorized(t, "A, who authorized nothing", r)
}

// TestOAuthTokenStaysWithItsURL: an admin who points a per-principal
// server at another URL after its users authorized it does not get their
// tokens there (nor the server's own): each token goes only to the
// resource it was issued for (RFC 8707), a user is asked to authorize
// again, and their new token serves the new URL.
func TestOAuthTokenStaysWithItsURL(t *testing.T) {
	t.Parallel()
	as := oauthtest.Start(t, oauthtest.Options{Scopes: []string{testmcp.Scope, "offline_access"}})
	url := testmcp.ServeProtected(t, "remote", as)
	elsewhere := testmcp.ServeProtected(t, "remote", as) // the admin's host, say
	e := startWith(t, nil, gateway.Options{})
	keyA, _ := e.perPrincipalRemote(t, url)
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		_, r := e.whoami(t, keyA.Key)
		return r.status != http.StatusNotFound, "whoami is unknown to the gateway"
	})
	e.authorizeAs(t, keyA.Key, "alice")
	if who, r := e.whoami(t, keyA.Key); who != "alice" {
		t.Fatalf("A's call: %q %d %s", who, r.status, r.body)
	}

	// The admin moves the server, and authorizes its own session there.
	r := e.do("GET", "/api/v1/servers/remote", nil)
	var cfg model.McpConfig
	if r.decode(t, &cfg); r.status != http.StatusOK {
		t.Fatalf("GET server: %d %s", r.status, r.body)
	}
	cfg.Transport.URL, cfg.Package.Identifier, cfg.Revision = elsewhere, elsewhere, 0
	if r := e.do("PUT", "/api/v1/servers/remote", model.ConfigUpdateRequest{Config: cfg}); r.status != http.StatusOK {
		t.Fatalf("PUT server: %d %s", r.status, r.body)
	}
	e.authorize(t, "remote")
	e.waitState("remote", model.StateRunning)

	_, r = e.whoami(t, keyA.Key)
	if got := as.Misdirected(); len(got) > 0 {
		t.Fatalf("tokens sent to a URL they were not issued for: %q", got)
	}
	wantNotAuthorized(t, "A after the server moved", r)
	e.authorizeAs(t, keyA.Key, "alice")
	if who, r := e.whoami(t, keyA.Key); who != "alice" {
		t.Fatalf("A's call after authorizing again: %q %d %s", who, r.status, r.body)
	}
	if got := as.Misdirected(); len(got) > 0 {
		t.Fatalf("tokens sent to a URL they were not issued for: %q", got)
	}
}
