package security

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// edge is mcpbus up with its gateway, for attacks through the HTTP edge.
type edge struct {
	t     *testing.T
	st    *stack.Stack
	url   string
	admin string
}

func startEdge(t *testing.T) *edge {
	t.Helper()
	logs := &testkit.LogBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), NATSPort: -1,
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner:  runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", ShutdownTimeout: 4 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if t.Failed() {
			t.Logf("log tail:\n%s", logs.Tail(4000))
		}
	})
	key, err := os.ReadFile(st.Gateway.AdminKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	return &edge{t: t, st: st, url: "http://" + st.Gateway.Addr(), admin: strings.TrimSpace(string(key))}
}

type answer struct {
	status int
	body   string
}

// do sends one request with key, and extra headers.
func (e *edge) do(key, method, path string, body any, header ...string) answer {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}

func (e *edge) key(req model.KeyCreateRequest) model.KeyCreateReply {
	e.t.Helper()
	var k model.KeyCreateReply
	a := e.do(e.admin, "POST", "/api/v1/keys", req)
	if err := json.Unmarshal([]byte(a.body), &k); err != nil || k.Key == "" {
		e.t.Fatalf("key %s: %d %s", req.Name, a.status, a.body)
	}
	return k
}

// TestSecondUserAtTheEdge: what a second user with their own key, and a key
// scoped to one tool, try against another principal's work through the
// gateway and the bus. Each attempt is refused as if the thing did not
// exist (no id or name of the other principal in the answer), and nothing
// changes.
func TestSecondUserAtTheEdge(t *testing.T) {
	e := startEdge(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := model.McpConfig{Name: "safe", Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		EnvVars:   map[string]model.EnvVar{"PUBLIC_NOTE": {Value: "note"}},
		Transport: model.Transport{Type: model.TransportStdio}, Runtime: model.Runtime{Eager: true}}
	if _, err := e.st.Client.CreateConfig(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	alice := e.key(model.KeyCreateRequest{Name: "alice", Scopes: []string{"call"}})
	mallory := e.key(model.KeyCreateRequest{Name: "mallory", Scopes: []string{"call", "chat"},
		Tools: model.ToolFilter{Allow: []string{"safe__echo"}}})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		a := e.do(alice.Key, "POST", "/mcp/invoke", map[string]any{"tool_name": "safe__echo", "params": map[string]any{"message": "up"}})
		if a.status == http.StatusOK && strings.Contains(a.body, "up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("safe__echo never answered alice: %d %s", a.status, a.body)
		}
	}
	// Alice's long task.
	var task model.Task
	a := e.do(alice.Key, "POST", "/api/v1/tasks", map[string]any{"name": "safe__sleep", "arguments": map[string]any{"ms": 60000}})
	if err := json.Unmarshal([]byte(a.body), &task); err != nil || a.status != http.StatusAccepted {
		t.Fatalf("alice's task: %d %s", a.status, a.body)
	}
	leaks := func(what string, a answer) {
		t.Helper()
		for _, secret := range []string{alice.ID, "alice", alice.Key} {
			if strings.Contains(a.body, secret) {
				t.Errorf("%s: the answer names alice (%q): %s", what, secret, a.body)
			}
		}
	}
	notFound := func(what string, a answer) {
		t.Helper()
		var ae apierr.Error
		if a.status != http.StatusNotFound || json.Unmarshal([]byte(a.body), &ae) != nil || ae.Code != apierr.NotFound {
			t.Errorf("%s: %d %s, want 404 NOT_FOUND", what, a.status, a.body)
		}
		leaks(what, a)
	}

	t.Run("another principal's task", func(t *testing.T) {
		for what, req := range map[string][2]string{
			"get": {"GET", "/api/v1/tasks/" + task.ID}, "result": {"GET", "/api/v1/tasks/" + task.ID + "/result?wait=1s"},
			"events": {"GET", "/api/v1/tasks/" + task.ID + "/events"}, "cancel": {"DELETE", "/api/v1/tasks/" + task.ID},
		} {
			notFound("mallory's task "+what, e.do(mallory.Key, req[0], req[1], nil))
		}
		if a := e.do(mallory.Key, "GET", "/api/v1/tasks?all=true", nil); a.status != http.StatusBadRequest || strings.Contains(a.body, task.ID) {
			t.Errorf("mallory lists every task: %d %s", a.status, a.body)
		}
		if a := e.do(mallory.Key, "GET", "/api/v1/tasks", nil); a.status != http.StatusOK || strings.Contains(a.body, task.ID) {
			t.Errorf("mallory's own list: %d %s", a.status, a.body)
		}
		var still model.Task
		if a := e.do(alice.Key, "GET", "/api/v1/tasks/"+task.ID, nil); json.Unmarshal([]byte(a.body), &still) != nil || still.State != model.TaskWorking {
			t.Errorf("alice's task after mallory's cancel: %d %s", a.status, a.body)
		}
	})

	t.Run("admin routes", func(t *testing.T) {
		for _, r := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/api/v1/events?replay=true", nil}, {"GET", "/api/v1/audit/verify", nil},
			{"GET", "/api/v1/keys", nil}, {"POST", "/api/v1/keys", model.KeyCreateRequest{Name: "root", Scopes: []string{"admin"}}},
			{"PUT", "/api/v1/servers/safe", map[string]any{"config": cfg}}, {"GET", "/api/v1/servers/safe/pins", nil},
			{"POST", "/api/v1/servers/safe/pins/approve", map[string]any{"tool": "echo", "hash": "x"}},
			{"POST", "/api/v1/agents", map[string]any{"name": "mine", "allow_tools": []string{"*"}}},
			{"GET", "/api/v1/approvals/rules", nil}, {"PUT", "/api/v1/approvals/rules", model.ApprovalRules{Default: model.ApprovalAllow}},
			{"GET", "/api/v1/chat/profiles", nil},
			// Paths that clean into an admin route, or a route of another scope.
			{"GET", "/api/v1/tasks/..%2F..%2Fkeys", nil}, {"GET", "/api/v1/me/authorizations/../../keys", nil},
			{"GET", "/mcp/../api/v1/keys", nil},
		} {
			a := e.do(mallory.Key, r.method, r.path, r.body)
			if a.status != http.StatusForbidden && a.status != http.StatusUnauthorized && a.status != http.StatusNotFound && a.status != http.StatusBadRequest {
				t.Errorf("mallory's %s %s: %d %s", r.method, r.path, a.status, a.body)
			}
			leaks(r.method+" "+r.path, a)
		}
		var keys model.KeyListReply
		if a := e.do(e.admin, "GET", "/api/v1/keys", nil); json.Unmarshal([]byte(a.body), &keys) != nil || len(keys.Keys) == 0 {
			t.Errorf("the keys after mallory's attempts: %s", a.body)
		}
		for _, k := range keys.Keys {
			if k.Name == "root" {
				t.Errorf("mallory made a key: %+v", k)
			}
		}
	})

	t.Run("a key scoped to one tool", func(t *testing.T) {
		// The gateway reads its own principal, never a header the client sends.
		forged := principal.Key("forged", true, model.ToolFilter{Allow: []string{"*"}}).Encode()
		for _, header := range [][]string{nil, {principal.Header, forged}} {
			a := e.do(mallory.Key, "POST", "/mcp/invoke", map[string]any{"tool_name": "safe__env", "params": map[string]any{"name": "PUBLIC_NOTE"}}, header...)
			if a.status != http.StatusNotFound || strings.Contains(a.body, "note") {
				t.Errorf("mallory's safe__env (header %v): %d %s", header, a.status, a.body)
			}
			notFound("mallory's task of safe__env", e.do(mallory.Key, "POST", "/api/v1/tasks", map[string]any{"name": "safe__env", "arguments": map[string]any{"name": "PUBLIC_NOTE"}}, header...))
		}
		if a := e.do(mallory.Key, "GET", "/api/v1/tools/search?q=environment+variable+sleep", nil); a.status != http.StatusOK || strings.Contains(a.body, "safe__env") || strings.Contains(a.body, "safe__sleep") {
			t.Errorf("mallory's search: %d %s", a.status, a.body)
		}
		if a := e.do(mallory.Key, "POST", "/mcp/invoke", map[string]any{"tool_name": "safe__echo", "params": map[string]any{"message": "mine"}}); a.status != http.StatusOK || !strings.Contains(a.body, "mine") {
			t.Errorf("mallory's own tool: %d %s", a.status, a.body)
		}
	})

	t.Run("an agent forging a principal", func(t *testing.T) {
		ag, err := e.st.AddAgent("forger", []string{"safe__ech*"})
		if err != nil {
			t.Fatal(err)
		}
		var v violations
		nc, err := connectSeed(t, e.st, ag.SeedFile, ag.InboxPrefix, &v)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) { // the runners know it
			m, err := nc.Request("mcp.v1.agent.forger.call.safe.echo", []byte(`{"message":"up"}`), 2*time.Second)
			if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent's own call: %v %v", err, m)
			}
		}
		// Its glob (safe__ech*) lets it publish on call.safe.*: the runner
		// refuses env whatever principal the header claims, and a task.
		for what, c := range map[string]struct {
			tool, code string
			h          nats.Header
		}{
			"env as the operator":  {"env", "404", nats.Header{principal.Header: []string{principal.Operator().Encode()}}},
			"env as alice (admin)": {"env", "404", nats.Header{principal.Header: []string{principal.Key(alice.ID, true, model.ToolFilter{}).Encode()}}},
			"echo as a durable task of the operator": {"echo", "400",
				nats.Header{principal.Header: []string{principal.Operator().Encode()}, "Mcp-Task": []string{"true"}}},
		} {
			msg := &nats.Msg{Subject: "mcp.v1.agent.forger.call.safe." + c.tool, Header: c.h, Data: []byte(`{"name":"PUBLIC_NOTE","message":"m"}`)}
			m, err := nc.RequestMsg(msg, 10*time.Second)
			if err != nil || m.Header.Get("Nats-Service-Error-Code") != c.code || strings.Contains(string(m.Data), "note") {
				t.Errorf("the agent's %s: %v %v", what, err, m)
			}
		}
		var list struct {
			Tasks []model.Task `json:"tasks"`
		}
		if a := e.do(e.admin, "GET", "/api/v1/tasks?all=true", nil); json.Unmarshal([]byte(a.body), &list) != nil || len(list.Tasks) != 1 {
			t.Errorf("tasks after the agent's attempts: %s", a.body)
		}
	})
	e.do(alice.Key, "DELETE", "/api/v1/tasks/"+task.ID, nil)
}
