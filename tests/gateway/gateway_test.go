// Package gateway tests the HTTP edge against the whole system as `mcpbus up`
// assembles it (tools/mcpbus/stack: config, credential, registry, runner on an
// embedded NATS): the admin API end to end, write-only credentials, registry
// search against local servers speaking the registries' APIs on recorded
// data, and readiness.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// The go-sdk test server and the mcpbus command (for the tests that run
// `mcpbus up`), each built once for all the tests. The tests run in
// parallel (they mostly wait): each has its own stack, on an in-process NATS
// or free ports, and its own temp dirs.
var testServer, mcpbusBin string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer, testkit.WithBinary(&mcpbusBin, testkit.BuildCommand("mcpbus", "./tools/mcpbus")))
}

// env is the stack plus a gateway in front of it.
type env struct {
	t     *testing.T
	st    *stack.Stack
	g     *gateway.Gateway
	url   string
	admin string
	logs  *testkit.LogBuffer
	dir   string // the data dir (admin key)
	// stop stops the gateway (once; the test's end does it too).
	stop func()
}

// start runs the stack (registry pointed at local fakes) and a gateway.
func start(t *testing.T) *env {
	t.Helper()
	return startWith(t, nil, gateway.Options{})
}

// startWith is start with the stack's options changed by mod (when set)
// and the gateway's options gw (Addr, DataDir and Logger are filled in).
func startWith(t *testing.T, mod func(*stack.Options), gw gateway.Options) *env {
	t.Helper()
	off := registrytest.SampleOfficial(t)
	smi := registrytest.SampleSmithery(t, "smk-gateway-test")

	logs := &testkit.LogBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	so := stack.Options{
		DataDir: dir, InProcessOnly: true, Logger: log,
		Runner:   runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second, StartTimeout: 20 * time.Second},
		Registry: registry.Options{OfficialURL: off.URL, SmitheryURL: smi.URL},
	}
	if mod != nil {
		mod(&so)
	}
	st, err := stack.Start(ctx, so)
	if err != nil {
		t.Fatalf("%v; the stack's log:\n%s", err, logs)
	}
	t.Cleanup(st.Close)
	return runGateway(t, st, "test-gateway", dir, logs, gw)
}

// runGateway runs a gateway of the stack st as bus identity name, with the
// data dir dir (where the admin key is, or is made).
func runGateway(t *testing.T, st *stack.Stack, name, dir string, logs *testkit.LogBuffer, gw gateway.Options) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := st.ConnectAs(name, access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gw.Addr, gw.DataDir, gw.Logger = "127.0.0.1:0", dir, log
	g, err := gateway.New(ctx, nc, gw)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	stopOnce := sync.OnceFunc(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	t.Cleanup(stopOnce)
	key, err := os.ReadFile(g.AdminKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, g: g, url: "http://" + g.Addr(), admin: strings.TrimSpace(string(key)), logs: logs, dir: dir, stop: stopOnce}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d: undecodable %s: %v", r.status, r.body, err)
	}
}

func (r reply) contract(t *testing.T) apierr.Error {
	t.Helper()
	var e apierr.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("status %d: not the error contract: %s", r.status, r.body)
	}
	return e
}

func (e *env) do(method, path string, body any) reply {
	e.t.Helper()
	return e.doKey(e.admin, method, path, body)
}

// doKey is do with another key.
func (e *env) doKey(key, method, path string, body any) reply {
	e.t.Helper()
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

func (e *env) waitState(slug, state string) model.Status {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := e.do("GET", "/api/v1/servers/"+slug+"/status", nil)
		var st model.Status
		if r.status == http.StatusOK {
			r.decode(e.t, &st)
			if st.State == state {
				return st
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("server %s: %d %s, want state %s", slug, r.status, r.body, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestReadyWithEveryService(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.do("GET", "/readyz", nil)
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	r.decode(t, &body)
	if r.status != http.StatusOK || body.Status != "ready" || body.Checks["runner"] != "ok" || body.Checks["config"] != "ok" {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
}

func TestAdminAPIServersEndToEnd(t *testing.T) {
	t.Parallel()
	e := start(t)
	cfg := model.McpConfig{Name: "Alpha Tools", Enabled: false,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio}}

	// Create.
	r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg})
	var created model.McpConfig
	r.decode(t, &created)
	if r.status != http.StatusCreated || created.ID == "" || created.Slug != "alpha-tools" || r.header.Get("Location") != "/api/v1/servers/alpha-tools" {
		t.Fatalf("create: %d %s %v", r.status, r.body, r.header.Get("Location"))
	}
	// Bad input changes nothing.
	r = e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: model.McpConfig{Name: "", Transport: model.Transport{Type: "carrier-pigeon"}}})
	if r.status != http.StatusBadRequest || r.contract(t).Code != apierr.Validation {
		t.Fatalf("invalid create: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/api/v1/servers", `{"config": {"name": "x"}, "sekrets": {}}`)
	if r.status != http.StatusBadRequest || r.contract(t).Code != apierr.Validation {
		t.Fatalf("unknown field: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg})
	if r.status != http.StatusConflict || r.contract(t).Code != apierr.Conflict {
		t.Fatalf("duplicate slug: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/servers", nil)
	var list rest.ServersReply
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Servers) != 1 || list.Servers[0].ID != created.ID {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	// Read by slug and by id.
	for _, ref := range []string{created.Slug, created.ID} {
		r = e.do("GET", "/api/v1/servers/"+ref, nil)
		var got model.McpConfig
		r.decode(t, &got)
		if r.status != http.StatusOK || got.ID != created.ID {
			t.Fatalf("get %s: %d %s", ref, r.status, r.body)
		}
	}
	if r := e.do("GET", "/api/v1/servers/nope", nil); r.status != http.StatusNotFound || r.contract(t).Code != apierr.NotFound {
		t.Fatalf("get unknown: %d %s", r.status, r.body)
	}

	// Update (the body may leave the id out; a different id is refused).
	upd := created
	upd.ID = ""
	upd.Package.Args = []string{"--name", "alpha"}
	r = e.do("PUT", "/api/v1/servers/alpha-tools", model.ConfigUpdateRequest{Config: upd})
	var updated model.McpConfig
	r.decode(t, &updated)
	if r.status != http.StatusOK || updated.ID != created.ID || updated.Revision <= created.Revision || len(updated.Package.Args) != 2 {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	other := upd
	other.ID = "00000000-0000-4000-8000-000000000000"
	if r := e.do("PUT", "/api/v1/servers/alpha-tools", model.ConfigUpdateRequest{Config: other}); r.status != http.StatusBadRequest || r.contract(t).Field != "config.id" {
		t.Fatalf("update with another id: %d %s", r.status, r.body)
	}
	stale := updated
	stale.Revision = created.Revision
	if r := e.do("PUT", "/api/v1/servers/"+created.ID, model.ConfigUpdateRequest{Config: stale}); r.status != http.StatusConflict {
		t.Fatalf("stale revision: %d %s", r.status, r.body)
	}

	// Enable: it runs and its tools appear on /mcp/tools; disable: they go.
	if st := e.do("GET", "/api/v1/servers/alpha-tools/status", nil); st.status != http.StatusOK {
		t.Fatalf("status of a disabled server: %d %s", st.status, st.body)
	}
	r = e.do("POST", "/api/v1/servers/alpha-tools/enable", nil)
	var enabled model.McpConfig
	r.decode(t, &enabled)
	if r.status != http.StatusOK || !enabled.Enabled {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	e.waitState("alpha-tools", model.StateRunning)
	waitTools(t, e, func(names []string) bool { return contains(names, "alpha-tools__echo") })
	r = e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "alpha-tools__echo", Params: json.RawMessage(`{"message":"through the stack"}`)})
	var inv rest.InvokeReply
	r.decode(t, &inv)
	if r.status != http.StatusOK || !inv.Success || !strings.Contains(string(inv.Result), "through the stack") {
		t.Fatalf("invoke: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/status", nil)
	var all rest.StatusReply
	r.decode(t, &all)
	if r.status != http.StatusOK || len(all.Servers) != 1 || all.Servers[0].State != model.StateRunning {
		t.Fatalf("all status: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/api/v1/servers/alpha-tools/disable", nil)
	if r.status != http.StatusOK {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	waitTools(t, e, func(names []string) bool { return !contains(names, "alpha-tools__echo") })
	if st := e.waitState("alpha-tools", model.StateDisabled); st.Server != "alpha-tools" {
		t.Fatalf("status after disable: %+v", st)
	}

	// Delete: gone for good.
	r = e.do("DELETE", "/api/v1/servers/alpha-tools", nil)
	var del model.ConfigDeleteReply
	r.decode(t, &del)
	if r.status != http.StatusOK || del.ID != created.ID {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/api/v1/servers/"+created.ID, nil); r.status != http.StatusNotFound {
		t.Fatalf("get after delete: %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/api/v1/servers/alpha-tools", nil); r.status != http.StatusNotFound {
		t.Fatalf("second delete: %d %s", r.status, r.body)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func waitTools(t *testing.T, e *env, ok func([]string) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := e.do("GET", "/mcp/tools", nil)
		var out rest.ToolsReply
		r.decode(t, &out)
		var names []string
		for _, tool := range out.Tools {
			names = append(names, tool.Name)
		}
		if ok(names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools %v never reached the expected state", names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCredentialsAreWriteOnly(t *testing.T) {
	t.Parallel()
	e := start(t)
	const secret = "ghp_gatewaySecretValue0123456789"
	const oauthSecret = "oauth-access-token-not-for-eyes"
	// A server that declares no secret gets none: storing one would claim an
	// effect it never has (the runner does not ask for it).
	plain := model.McpConfig{Name: "plain", Package: model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio}}
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: plain}); r.status != http.StatusCreated {
		t.Fatalf("create plain: %d %s", r.status, r.body)
	}
	if r := e.do("PUT", "/api/v1/servers/plain/credentials", model.Credentials{Env: map[string]string{"DUMMY_TOKEN": "x"}}); r.status != http.StatusBadRequest ||
		r.contract(t).Field != "env.DUMMY_TOKEN" || !strings.Contains(r.contract(t).Message, "declares no secret") {
		t.Fatalf("a secret for a server without secrets: %d %s", r.status, r.body)
	}
	cfg := model.McpConfig{Name: "creds", Enabled: false, AuthType: model.AuthAPIKey,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio}}
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	// Headers never reach a stdio server.
	if r := e.do("PUT", "/api/v1/servers/creds/credentials", model.Credentials{Headers: map[string]string{"X-Api-Key": "h"}}); r.status != http.StatusBadRequest ||
		r.contract(t).Field != "headers.X-Api-Key" {
		t.Fatalf("a header for a stdio server: %d %s", r.status, r.body)
	}
	r := e.do("PUT", "/api/v1/servers/creds/credentials", model.Credentials{
		Env:   map[string]string{"GITHUB_TOKEN": secret},
		OAuth: &model.OAuthToken{AccessToken: oauthSecret, EnvVar: "OAUTH_TOKEN", Provider: "github"},
	})
	if r.status != http.StatusOK || strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), oauthSecret) {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/api/v1/servers/creds/credentials", nil)
	var d model.CredDescription
	r.decode(t, &d)
	if r.status != http.StatusOK || !d.Has("GITHUB_TOKEN") || d.OAuth == nil || d.OAuth.Provider != "github" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), oauthSecret) {
		t.Fatalf("GET credentials returned a value: %s", r.body)
	}
	// Merge adds; delete by name removes one.
	if r := e.do("PUT", "/api/v1/servers/creds/credentials", model.Credentials{Env: map[string]string{"X_API_KEY": "hdr-secret-123"}}); r.status != http.StatusOK {
		t.Fatalf("merge: %d %s", r.status, r.body)
	}
	r = e.do("DELETE", "/api/v1/servers/creds/credentials?name=GITHUB_TOKEN", nil)
	d = model.CredDescription{}
	r.decode(t, &d)
	if r.status != http.StatusOK || d.Has("GITHUB_TOKEN") || !d.Has("X_API_KEY") {
		t.Fatalf("delete one: %d %s", r.status, r.body)
	}
	// Bad input: nothing to set, an unknown field, a bad flag, an unknown server.
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/api/v1/servers/creds/credentials", `{}`, http.StatusBadRequest},
		{"/api/v1/servers/creds/credentials", `{"env": {"A": "b"}, "password": "x"}`, http.StatusBadRequest},
		{"/api/v1/servers/creds/credentials?replace=maybe", `{"env": {"A": "b"}}`, http.StatusBadRequest},
		{"/api/v1/servers/nobody/credentials", `{"env": {"A": "b"}}`, http.StatusNotFound},
	} {
		if r := e.do("PUT", c.path, c.body); r.status != c.status || r.contract(t).Code == "" {
			t.Fatalf("PUT %s %s: %d %s, want %d", c.path, c.body, r.status, r.body, c.status)
		}
	}
	r = e.do("GET", "/api/v1/servers/creds/credentials", nil)
	d = model.CredDescription{}
	r.decode(t, &d)
	if d.Has("A") || !d.Has("X_API_KEY") {
		t.Fatalf("bad requests changed the secrets: %s", r.body)
	}
	// Delete everything.
	r = e.do("DELETE", "/api/v1/servers/creds/credentials", nil)
	d = model.CredDescription{}
	r.decode(t, &d)
	if r.status != http.StatusOK || len(d.Env)+len(d.Headers)+len(d.Keyfiles) != 0 || d.OAuth != nil {
		t.Fatalf("delete all: %d %s", r.status, r.body)
	}
	// No value reached any log line (gateway or services).
	for _, s := range []string{secret, oauthSecret, "hdr-secret-123", e.admin} {
		if strings.Contains(e.logs.String(), s) {
			t.Fatalf("a secret reached the logs")
		}
	}
}

func TestRegistrySearch(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.do("GET", "/api/v1/registry/search?q=airtable&registry=official&page_size=5", nil)
	var res model.RegistrySearchReply
	r.decode(t, &res)
	if r.status != http.StatusOK || len(res.Results) == 0 || res.PageSize != 5 {
		t.Fatalf("search: %d %s", r.status, r.body)
	}
	found := false
	for _, x := range res.Results {
		if x.Name == "io.github.domdomegg/airtable-mcp-server" && contains(x.Sources, model.SourceOfficial) {
			found = true
		}
	}
	if !found {
		t.Fatalf("airtable server not in results: %s", r.body)
	}
	if r := e.do("GET", "/api/v1/registry/search?q=x&page=two", nil); r.status != http.StatusBadRequest || r.contract(t).Field != "page" {
		t.Fatalf("bad page: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/api/v1/registry/search?q=x&registry=npm", nil); r.status != http.StatusBadRequest || r.contract(t).Code != apierr.Validation {
		t.Fatalf("bad registry: %d %s", r.status, r.body)
	}
}
