package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// The REST routes the web console needs besides the servers API (/me, keys,
// agents, restart, history and rollback, install plans, call events with
// their error, same-origin writes), against the whole stack as `mcpbus up`
// assembles it, registry stand-ins included.

// wantInvalid wants a 400 VALIDATION_ERROR naming field.
func wantInvalid(t *testing.T, what string, r reply, field string) {
	t.Helper()
	if r.status != http.StatusBadRequest {
		t.Fatalf("%s: %d %s, want 400", what, r.status, r.body)
	}
	if c := r.contract(t); c.Code != apierr.Validation || c.Field != field {
		t.Fatalf("%s: %s field %q, want VALIDATION_ERROR field %q (%s)", what, c.Code, c.Field, field, r.body)
	}
}

// wantCode wants status with the error contract's code.
func wantCode(t *testing.T, what string, r reply, status int, code apierr.Code) {
	t.Helper()
	if r.status != status || r.contract(t).Code != code {
		t.Fatalf("%s: %d %s, want %d %s", what, r.status, r.body, status, code)
	}
}

// rawDo sends one request with exactly the given headers (no defaults).
func rawDo(t *testing.T, method, url, body string, hdr map[string]string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, time.Minute), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

func TestConsoleMe(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.do("GET", "/api/v1/me", nil)
	var me rest.MeReply
	r.decode(t, &me)
	if r.status != http.StatusOK || me.KeyID == "" || !slices.Equal(me.Scopes, []string{"admin"}) || !strings.Contains(string(r.body), `"jaeger_url":""`) {
		t.Fatalf("me (admin): %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), e.admin) || strings.Contains(string(r.body), strings.TrimPrefix(e.admin, "mcpbus_"+me.KeyID+"_")) {
		t.Fatalf("me shows the key's secret: %s", r.body)
	}
	if r := httpDo(t, "GET", e.url+"/api/v1/me", "", nil); r.status != http.StatusUnauthorized || r.contract(t).Code != apierr.Unauthorized {
		t.Fatalf("me without a key: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "GET", e.url+"/api/v1/me", "mcpbus_0123456789abcdef_"+strings.Repeat("A", 43), nil); r.status != http.StatusUnauthorized {
		t.Fatalf("me with an unknown key: %d %s", r.status, r.body)
	}
}

func TestConsoleKeys(t *testing.T) {
	t.Parallel()
	e := start(t)
	// Create: the secret is in this reply only.
	r := e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "console call", Scopes: []string{"call"}})
	var callKey model.KeyCreateReply
	r.decode(t, &callKey)
	if r.status != http.StatusCreated || !strings.HasPrefix(callKey.Key, "mcpbus_"+callKey.ID+"_") || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d %s %v", r.status, r.body, r.header)
	}
	r = e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "console chat", Scopes: []string{"chat"}})
	var chatKey model.KeyCreateReply
	r.decode(t, &chatKey)
	if r.status != http.StatusCreated {
		t.Fatalf("create chat key: %d %s", r.status, r.body)
	}
	secret := func(k model.KeyCreateReply) string { return strings.TrimPrefix(k.Key, "mcpbus_"+k.ID+"_") }

	// List: every key, never a secret.
	r = e.do("GET", "/api/v1/keys", nil)
	var list model.KeyListReply
	r.decode(t, &list)
	ids := []string{}
	for _, k := range list.Keys {
		ids = append(ids, k.ID)
	}
	if r.status != http.StatusOK || !slices.Contains(ids, callKey.ID) || !slices.Contains(ids, chatKey.ID) || len(ids) != 3 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	for _, s := range []string{secret(callKey), secret(chatKey), e.admin[len(e.admin)-43:], `"key"`, `"hash"`} {
		if strings.Contains(string(r.body), s) {
			t.Fatalf("list shows %q: %s", s, r.body)
		}
	}

	// Bad input: the field is named.
	wantInvalid(t, "empty name", e.do("POST", "/api/v1/keys", `{"name": ""}`), "name")
	wantInvalid(t, "name of the wrong type", e.do("POST", "/api/v1/keys", `{"name": 5}`), "name")
	wantInvalid(t, "unknown scope", e.do("POST", "/api/v1/keys", `{"name": "x", "scopes": ["root"]}`), "scopes[0]")
	wantInvalid(t, "unknown field", e.do("POST", "/api/v1/keys", `{"name": "x", "secret": "mine"}`), "secret")
	wantInvalid(t, "bad glob", e.do("POST", "/api/v1/keys", `{"name": "x", "tools": {"allow": ["[a-"]}}`), "tools.allow[0]")
	wantInvalid(t, "unknown tools_mode", e.do("POST", "/api/v1/keys", `{"name": "x", "tools_mode": "lazy"}`), "tools_mode")
	wantInvalid(t, "pins without search", e.do("POST", "/api/v1/keys", `{"name": "x", "pinned_tools": ["a__b"]}`), "pinned_tools")
	wantInvalid(t, "bad id", e.do("DELETE", "/api/v1/keys/not-a-key-id", nil), "id")
	wantInvalid(t, "bad include_revoked", e.do("GET", "/api/v1/keys?include_revoked=maybe", nil), "include_revoked")
	wantCode(t, "unknown id", e.do("DELETE", "/api/v1/keys/0123456789abcdef", nil), http.StatusNotFound, apierr.NotFound)

	// Scopes: any key may ask who it is; only admin keys manage keys and agents.
	for _, k := range []model.KeyCreateReply{callKey, chatKey} {
		r := httpDo(t, "GET", e.url+"/api/v1/me", k.Key, nil)
		var me rest.MeReply
		r.decode(t, &me)
		if r.status != http.StatusOK || me.KeyID != k.ID || me.Name != k.Name || !slices.Equal(me.Scopes, k.Scopes) {
			t.Fatalf("me with %v: %d %s", k.Scopes, r.status, r.body)
		}
		for _, rt := range []struct{ method, path string }{{"GET", "/api/v1/keys"}, {"POST", "/api/v1/keys"},
			{"DELETE", "/api/v1/keys/" + k.ID}, {"GET", "/api/v1/agents"}, {"POST", "/api/v1/agents"}, {"DELETE", "/api/v1/agents/x"},
			{"POST", "/api/v1/servers/x/restart"}, {"GET", "/api/v1/servers/x/history"}, {"POST", "/api/v1/registry/plan"}} {
			var body any
			if rt.method == "POST" {
				body = map[string]string{"name": "x"}
			}
			if r := httpDo(t, rt.method, e.url+rt.path, k.Key, body); r.status != http.StatusForbidden || r.contract(t).Code != apierr.Unauthorized {
				t.Fatalf("%s %s with a %v key: %d %s, want 403", rt.method, rt.path, k.Scopes, r.status, r.body)
			}
		}
	}

	// Revoke: the key fails at once.
	r = e.do("DELETE", "/api/v1/keys/"+callKey.ID, nil)
	var revoked model.APIKey
	r.decode(t, &revoked)
	if r.status != http.StatusOK || revoked.ID != callKey.ID || !revoked.Revoked() || strings.Contains(string(r.body), secret(callKey)) {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "GET", e.url+"/api/v1/me", callKey.Key, nil); r.status != http.StatusUnauthorized || r.contract(t).Code != apierr.Unauthorized {
		t.Fatalf("me with the revoked key: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "GET", e.url+"/mcp/tools", callKey.Key, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("tools with the revoked key: %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/api/v1/keys/"+callKey.ID, nil); r.status != http.StatusOK {
		t.Fatalf("revoking again: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/keys", nil)
	list = model.KeyListReply{}
	r.decode(t, &list)
	for _, k := range list.Keys {
		if k.ID == callKey.ID {
			t.Fatalf("the revoked key is listed: %s", r.body)
		}
	}
	r = e.do("GET", "/api/v1/keys?include_revoked=true", nil)
	list = model.KeyListReply{}
	r.decode(t, &list)
	if len(list.Keys) != 3 {
		t.Fatalf("include_revoked: %s", r.body)
	}
	// The bootstrap key and the chat key still work.
	if r := httpDo(t, "GET", e.url+"/api/v1/me", chatKey.Key, nil); r.status != http.StatusOK {
		t.Fatalf("me with the chat key after another's revocation: %d %s", r.status, r.body)
	}
	// A search-mode key with a pin: both settings kept and listed.
	r = e.do("POST", "/api/v1/keys", `{"name": "searcher", "tools_mode": "search", "pinned_tools": ["alpha__echo"]}`)
	var searcher model.KeyCreateReply
	r.decode(t, &searcher)
	if r.status != http.StatusCreated || searcher.ToolsMode != model.KeyToolsModeSearch || !slices.Equal(searcher.PinnedTools, []string{"alpha__echo"}) {
		t.Fatalf("create a search-mode key: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/keys", nil)
	list = model.KeyListReply{}
	r.decode(t, &list)
	if i := slices.IndexFunc(list.Keys, func(k model.APIKey) bool { return k.ID == searcher.ID }); i < 0 || list.Keys[i].ToolsMode != "search" || len(list.Keys[i].PinnedTools) != 1 {
		t.Fatalf("the search-mode key as listed: %s", r.body)
	}
	// The key's secret reached no log line.
	if strings.Contains(e.logs.String(), secret(callKey)) || strings.Contains(e.logs.String(), secret(chatKey)) {
		t.Fatal("a key's secret reached the logs")
	}
}

func TestConsoleServersRestartHistoryRollback(t *testing.T) {
	t.Parallel()
	e := start(t)
	// A server and its secret in one call, as the console's Add page saves it.
	const token = "tok-console-0123456789"
	cfg := testServerConfig("alpha")
	r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg, Secrets: &model.Credentials{Env: map[string]string{"API_TOKEN": token}}})
	var created model.McpConfig
	r.decode(t, &created)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), token) {
		t.Fatalf("create with secrets: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/api/v1/servers/alpha/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	before := e.waitState("alpha", model.StateRunning)
	waitTools(t, e, func(names []string) bool { return contains(names, "alpha__env") })
	// Its SHA-256: a result carrying the secret itself would be redacted.
	sum := sha256.Sum256([]byte(token))
	r = e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "alpha__env_sha256", Params: json.RawMessage(`{"name":"API_TOKEN"}`)})
	if r.status != http.StatusOK || !strings.Contains(string(r.body), hex.EncodeToString(sum[:])) {
		t.Fatalf("the secret given with the create did not reach the server: %d %s", r.status, r.body)
	}

	// Restart: a new process, running, its status in the reply.
	r = e.do("POST", "/api/v1/servers/alpha/restart", nil)
	var st model.Status
	r.decode(t, &st)
	if r.status != http.StatusOK || st.Server != "alpha" || st.State != model.StateRunning || st.PID == 0 || st.PID == before.PID || !st.StartedAt.After(before.StartedAt) {
		t.Fatalf("restart: %d %s (before: pid %d started %s)", r.status, r.body, before.PID, before.StartedAt)
	}
	if r := e.do("POST", "/api/v1/servers/"+created.ID+"/restart", nil); r.status != http.StatusOK {
		t.Fatalf("restart by id: %d %s", r.status, r.body)
	}
	wantCode(t, "restart unknown", e.do("POST", "/api/v1/servers/nope/restart", nil), http.StatusNotFound, apierr.NotFound)

	// History: every revision; rollback restores an earlier one as a new revision.
	upd := created
	upd.Enabled = true
	upd.EnvVars = map[string]model.EnvVar{"SERVER_ID": {Value: "changed"}}
	upd.Revision = 0
	r = e.do("PUT", "/api/v1/servers/alpha", model.ConfigUpdateRequest{Config: upd})
	var changed model.McpConfig
	r.decode(t, &changed)
	if r.status != http.StatusOK || changed.EnvVars["SERVER_ID"].Value != "changed" {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/servers/alpha/history", nil)
	var hist model.ConfigHistoryReply
	r.decode(t, &hist)
	if r.status != http.StatusOK || len(hist.Revisions) < 3 || hist.Revisions[0].Revision != created.Revision {
		t.Fatalf("history: %d %s", r.status, r.body)
	}
	// The server's own numbers: 1, 2, 3… whatever the other servers did.
	for i, rev := range hist.Revisions {
		if rev.Version != uint64(i+1) {
			t.Fatalf("history entry %d has version %d: %s", i, rev.Version, r.body)
		}
	}
	if strings.Contains(string(r.body), token) {
		t.Fatalf("history shows the secret: %s", r.body)
	}
	r = e.do("POST", "/api/v1/servers/alpha/rollback", rest.RollbackBody{Version: 1})
	var rolled model.McpConfig
	r.decode(t, &rolled)
	if r.status != http.StatusOK || rolled.EnvVars["SERVER_ID"].Value != "alpha" || rolled.Revision <= changed.Revision || rolled.ID != created.ID ||
		rolled.Version != uint64(len(hist.Revisions)+1) {
		t.Fatalf("rollback: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/servers/alpha", nil)
	var now model.McpConfig
	r.decode(t, &now)
	if now.EnvVars["SERVER_ID"].Value != "alpha" || now.Enabled {
		t.Fatalf("after rollback: %s", r.body)
	}
	wantInvalid(t, "version 0", e.do("POST", "/api/v1/servers/alpha/rollback", `{"version": 0}`), "version")
	wantInvalid(t, "version and revision", e.do("POST", "/api/v1/servers/alpha/rollback", `{"version": 1, "revision": 1}`), "version")
	wantInvalid(t, "revision of the wrong type", e.do("POST", "/api/v1/servers/alpha/rollback", `{"revision": "one"}`), "revision")
	wantInvalid(t, "negative revision", e.do("POST", "/api/v1/servers/alpha/rollback", `{"revision": -1}`), "revision")
	wantInvalid(t, "unknown field", e.do("POST", "/api/v1/servers/alpha/rollback", `{"revision": 1, "force": true}`), "force")
	if r := e.do("POST", "/api/v1/servers/alpha/rollback", rest.RollbackBody{Version: 99999}); r.status != http.StatusNotFound || r.contract(t).Field != "version" {
		t.Fatalf("rollback to no revision: %d %s", r.status, r.body)
	}
	wantCode(t, "history of unknown", e.do("GET", "/api/v1/servers/nope/history", nil), http.StatusNotFound, apierr.NotFound)
	wantCode(t, "rollback of unknown", e.do("POST", "/api/v1/servers/nope/rollback", rest.RollbackBody{Version: 1}), http.StatusNotFound, apierr.NotFound)
}

func TestConsoleRegistryPlan(t *testing.T) {
	t.Parallel()
	e := start(t)
	const name = "io.github.domdomegg/airtable-mcp-server"
	r := e.do("POST", "/api/v1/registry/plan", model.RegistryGetRequest{Name: name, Registry: model.SourceOfficial})
	var plan model.InstallPlan
	r.decode(t, &plan)
	if r.status != http.StatusOK || plan.Name != name || !plan.Ready || plan.Draft == nil || plan.AuthType != model.AuthAPIKey {
		t.Fatalf("plan: %d %s", r.status, r.body)
	}
	var cred *model.PlanCredential
	for i, c := range plan.Credentials {
		if c.Name == "AIRTABLE_API_KEY" {
			cred = &plan.Credentials[i]
		}
	}
	if cred == nil || cred.Kind != model.CredentialEnv || !cred.Required {
		t.Fatalf("plan credentials: %+v", plan.Credentials)
	}
	// Saved as the console does: the draft renamed, the secret beside it.
	const secret = "patCONSOLE-plan-secret"
	// The draft names its slug and is enabled: a new name wants a new slug
	// (empty: derived from the name); disabled here, as nothing may run npx.
	draft := *plan.Draft
	draft.Name, draft.Slug, draft.Enabled = "My Airtable", "", false
	r = e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: draft, Secrets: &model.Credentials{Env: map[string]string{cred.Name: secret}}})
	var saved model.McpConfig
	r.decode(t, &saved)
	if r.status != http.StatusCreated || saved.Slug != "my-airtable" || strings.Contains(string(r.body), secret) {
		t.Fatalf("save the plan: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/servers/my-airtable/credentials", nil)
	var d model.CredDescription
	r.decode(t, &d)
	if r.status != http.StatusOK || !d.Has(cred.Name) || strings.Contains(string(r.body), secret) {
		t.Fatalf("credentials of the saved plan: %d %s", r.status, r.body)
	}

	wantInvalid(t, "no name", e.do("POST", "/api/v1/registry/plan", `{"registry": "official"}`), "name")
	wantInvalid(t, "unknown field", e.do("POST", "/api/v1/registry/plan", `{"name": "x", "secrets": {}}`), "secrets")
	wantInvalid(t, "variables of the wrong type", e.do("POST", "/api/v1/registry/plan", `{"name": "x", "variables": ["a"]}`), "variables")
	if r := e.do("POST", "/api/v1/registry/plan", model.RegistryGetRequest{Name: name, Registry: "npm"}); r.status != http.StatusBadRequest || r.contract(t).Code != apierr.Validation {
		t.Fatalf("unknown registry: %d %s", r.status, r.body)
	}
	wantCode(t, "unknown entry", e.do("POST", "/api/v1/registry/plan", model.RegistryGetRequest{Name: "io.github.nobody/nothing-here", Registry: model.SourceOfficial}),
		http.StatusNotFound, apierr.NotFound)
}

func TestConsoleAgents(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.do("GET", "/api/v1/agents", nil)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"agents":[]}` {
		t.Fatalf("empty list: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/api/v1/agents", model.AgentCreateRequest{Name: "ci", Allow: []string{"alpha__*"}})
	var ag model.Agent
	r.decode(t, &ag)
	if r.status != http.StatusCreated || ag.Name != "ci" || !slices.Equal(ag.Allow, []string{"alpha__*"}) || ag.SeedFile == "" || r.header.Get("Location") != "/api/v1/agents/ci" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	// The seed stays on the host: no reply carries it.
	seed, err := os.ReadFile(ag.SeedFile)
	if err != nil || len(strings.TrimSpace(string(seed))) == 0 {
		t.Fatalf("the agent's seed file: %v", err)
	}
	seedText := strings.TrimSpace(string(seed))
	if strings.Contains(string(r.body), seedText) {
		t.Fatalf("create returned the seed: %s", r.body)
	}
	r = e.do("GET", "/api/v1/agents", nil)
	var list model.AgentList
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Agents) != 1 || list.Agents[0].Name != "ci" || strings.Contains(string(r.body), seedText) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	wantCode(t, "duplicate", e.do("POST", "/api/v1/agents", model.AgentCreateRequest{Name: "ci"}), http.StatusConflict, apierr.Conflict)
	wantInvalid(t, "bad name", e.do("POST", "/api/v1/agents", `{"name": "Not A Slug"}`), "name")
	wantInvalid(t, "unknown field", e.do("POST", "/api/v1/agents", `{"name": "x", "seed": "S"}`), "seed")
	wantInvalid(t, "allow of the wrong type", e.do("POST", "/api/v1/agents", `{"name": "x", "allow": "alpha__*"}`), "allow")
	wantInvalid(t, "bad name in the URL", e.do("DELETE", "/api/v1/agents/No%20Such", nil), "name")

	r = e.do("DELETE", "/api/v1/agents/ci", nil)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"name":"ci"}` {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	wantCode(t, "revoke again", e.do("DELETE", "/api/v1/agents/ci", nil), http.StatusNotFound, apierr.NotFound)
	if _, err := os.Stat(ag.SeedFile); !os.IsNotExist(err) {
		t.Fatalf("the revoked agent's seed file is still there: %v", err)
	}
}

// A failed call's event carries the error's message next to its code.
func TestConsoleCallEventError(t *testing.T) {
	t.Parallel()
	e := start(t)
	cfg := testServerConfig("boom")
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/api/v1/servers/boom/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	e.waitState("boom", model.StateRunning)
	waitTools(t, e, func(names []string) bool { return contains(names, "boom__crash") })
	events := openSSE(t, e.url+"/api/v1/events?kinds=call", e.admin)
	if r := e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "boom__echo", Params: json.RawMessage(`{"message":"fine"}`)}); r.status != http.StatusOK {
		t.Fatalf("echo: %d %s", r.status, r.body)
	}
	r := e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "boom__crash", Params: json.RawMessage(`{}`)})
	var inv rest.InvokeReply
	r.decode(t, &inv)
	if inv.Success || inv.Details == nil {
		t.Fatalf("crash: %d %s", r.status, r.body)
	}
	got := map[string]model.CallEvent{}
	deadline := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case f, ok := <-events.frames:
			if !ok {
				t.Fatal("the event stream ended")
			}
			var ev rest.Event
			var call model.CallEvent
			if f.event != "call" || json.Unmarshal([]byte(f.data), &ev) != nil || json.Unmarshal(ev.Data, &call) != nil {
				t.Fatalf("frame %+v", f)
			}
			got[call.Tool] = call
		case <-deadline:
			t.Fatalf("call events after 30s: %+v", got)
		}
	}
	if ok := got["echo"]; ok.Outcome != "ok" || ok.Error != "" || ok.Code != "" {
		t.Fatalf("the ok call's event: %+v", ok)
	}
	failed := got["crash"]
	if failed.Outcome != "error" || failed.Code != string(inv.Details.Code) || failed.Error != inv.Details.Message ||
		failed.Error == "" || strings.ContainsAny(failed.Error, "\r\n") || len([]rune(failed.Error)) > model.CallEventErrorMax {
		t.Fatalf("the failed call's event: %+v (reply %s)", failed, r.body)
	}
}

// The console's own origin may write without any --cors-origin; other
// origins, sibling ports and same-site pages still may not.
func TestConsoleSameOriginWrites(t *testing.T) {
	t.Parallel()
	e := start(t)
	port := e.url[strings.LastIndex(e.url, ":")+1:]
	body := `{"revision": 1}`
	send := func(hdr map[string]string) reply {
		h := map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json"}
		for k, v := range hdr {
			h[k] = v
		}
		return rawDo(t, "POST", e.url+"/api/v1/servers/nope/rollback", body, h)
	}
	for _, hdr := range []map[string]string{
		{"Origin": e.url, "Sec-Fetch-Site": "same-origin"}, // a current browser on the console
		{"Origin": e.url},                       // an older one, without Sec-Fetch-Site
		{"Origin": "https://127.0.0.1:" + port}, // behind TLS termination: same host:port
		{},                                      // not a browser (curl, the CLI)
	} {
		if r := send(hdr); r.status != http.StatusNotFound {
			t.Fatalf("same origin %v: %d %s, want 404 (past the guard)", hdr, r.status, r.body)
		}
	}
	for _, hdr := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Origin": "http://localhost:" + port}, // another name: another origin
		{"Origin": "http://127.0.0.1:1"},       // a sibling port
		{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"},
		{"Origin": "null"},
	} {
		if r := send(hdr); r.status != http.StatusForbidden || r.contract(t).Code != apierr.Unauthorized {
			t.Fatalf("origin %v: %d %s, want 403", hdr, r.status, r.body)
		}
	}
}

// Without the agents service (a bus `mcpbus up` does not host) the agents
// routes say so with 503; with auth off, /api/v1/me is the anonymous principal.
func TestConsoleNoAgentsServiceAndNoAuth(t *testing.T) {
	t.Parallel()
	logs := &testkit.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack log (tail):\n%s", logs.Tail(8000))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{
		DataDir: t.TempDir(), InProcessOnly: true, InsecureBus: true,
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		Runner:  runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", NoAuth: true, ShutdownTimeout: 4 * time.Second, JaegerURL: "http://jaeger.example:16686"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	url := "http://" + st.Gateway.Addr()
	for _, rt := range []struct {
		method, path string
		body         any
	}{{"GET", "/api/v1/agents", nil}, {"POST", "/api/v1/agents", model.AgentCreateRequest{Name: "ci"}}, {"DELETE", "/api/v1/agents/ci", nil}} {
		r := httpDo(t, rt.method, url+rt.path, "", rt.body)
		if r.status != http.StatusServiceUnavailable || r.contract(t).Code != apierr.ServiceUnavailable || !strings.Contains(r.contract(t).Message, "managed by mcpbus up") {
			t.Fatalf("%s %s without an agents service: %d %s", rt.method, rt.path, r.status, r.body)
		}
	}
	r := httpDo(t, "GET", url+"/api/v1/me", "", nil)
	var me rest.MeReply
	r.decode(t, &me)
	if r.status != http.StatusOK || me.KeyID != "anonymous" || !slices.Equal(me.Scopes, []string{"admin"}) || me.JaegerURL != "http://jaeger.example:16686" {
		t.Fatalf("me with auth off: %d %s", r.status, r.body)
	}
}
