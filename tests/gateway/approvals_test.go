package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// Approvals owned by the gateway, for any MCP client (issue 30 item 2), on
// the whole system as `mcpbus up` runs it: a session client (2025-11-25)
// and a 2026-07-28 client each get the approval form in their own way and
// answer it; a client that cannot ask waits while an admin approves over
// REST or denies over the bus (the CLI's path); a call-scope key a rule
// names as approver decides, another key neither sees nor decides; a deny
// rule refuses; a changed argument needs a new approval; the timeout
// denies; and a held call survives its gateway instance (the record is in
// KV): another instance lists it, approves it and releases the retried call.
func TestApprovalsForAnyClient(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	slug := e.enable(t, testServerConfig("guarded"))
	echo, fail := slug+"__echo", slug+"__fail"
	setRules := func(timeout int) {
		t.Helper()
		r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: timeout,
			Rules: []model.GatewayApprovalRule{{Tool: echo, Decision: model.ApprovalAsk}, {Tool: fail, Decision: model.ApprovalDeny}}})
		if r.status != http.StatusOK {
			t.Fatalf("PUT rules: %d %s", r.status, r.body)
		}
	}
	setRules(60)
	// The rules are validated: a bad one is VALIDATION_ERROR naming it.
	if r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, map[string]any{"rules": []any{map[string]any{"tool": "x", "decision": "maybe"}}}); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "rules.0.decision") {
		t.Fatalf("bad rules: %d %s", r.status, r.body)
	}

	plain := connectMCP(t, e.url, e.admin) // 2026-07-28, declares no elicitation: cannot be asked

	t.Run("deny rule", func(t *testing.T) {
		res, err := callTool(t, plain.ClientSession, fail, map[string]any{"message": "x"})
		if err != nil || !res.IsError || !strings.Contains(textOf(res), "deny") {
			t.Fatalf("denied tool: %v %q %v", res != nil && res.IsError, textOf(res), err)
		}
	})

	t.Run("session client answers elicitation/create", func(t *testing.T) {
		for _, approve := range []bool{true, false} {
			p := &prompts{}
			cs := connectAsker(t, e.url, e.admin, "2025-11-25", p.answer(approve))
			res, err := cs.CallTool(ctxT(t, time.Minute), &mcp.CallToolParams{Name: echo, Arguments: map[string]any{"message": fmt.Sprintf("session %v", approve)}})
			if err != nil {
				t.Fatal(err)
			}
			if approve && (res.IsError || textOf(res) != "session true") {
				t.Fatalf("approved through the session: %+v", textOf(res))
			}
			if !approve && (!res.IsError || !strings.Contains(textOf(res), "declined by the calling client")) {
				t.Fatalf("declined through the session: %s", textOf(res))
			}
			p.wantAsked(t, echo)
		}
	})

	t.Run("2026-07-28 client answers input_required", func(t *testing.T) {
		p := &prompts{}
		cs := connectAsker(t, e.url, e.admin, "", p.answer(true))
		res, err := cs.CallTool(ctxT(t, time.Minute), &mcp.CallToolParams{Name: echo, Arguments: map[string]any{"message": "modern"}})
		if err != nil || res.IsError || textOf(res) != "modern" {
			t.Fatalf("approved through a multi round-trip result: %+v %v", res, err)
		}
		p.wantAsked(t, echo)
	})

	t.Run("client that cannot ask: REST approves, the bus denies", func(t *testing.T) {
		for _, approve := range []bool{true, false} {
			msg := fmt.Sprintf("held %v", approve)
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				res, err := plain.CallTool(ctxT(t, time.Minute), &mcp.CallToolParams{Name: echo, Arguments: map[string]any{"message": msg}})
				if err != nil {
					res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "error: " + err.Error()}}}
				}
				done <- res
			}()
			h := waitHeld(t, e.url, e.admin, msg)
			if h.Principal == "" || h.Tool != echo || len(h.ArgsSHA256) != 64 {
				t.Fatalf("held call: %+v", h)
			}
			if approve {
				if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", e.admin, nil); r.status != http.StatusOK {
					t.Fatalf("approve: %d %s", r.status, r.body)
				}
			} else if _, err := e.st.Client.DecideApproval(ctxT(t, 10*time.Second), model.ApprovalDecideRequest{ID: h.ID, Decision: model.DecisionDeny, Reason: "not today"}); err != nil {
				t.Fatalf("deny over the bus: %v", err)
			}
			res := <-done
			if approve && (res.IsError || textOf(res) != msg) {
				t.Fatalf("released call: %s", textOf(res))
			}
			if !approve && (!res.IsError || !strings.Contains(textOf(res), "not today")) {
				t.Fatalf("denied call: %s", textOf(res))
			}
			// Decided and used: a second answer is CONFLICT.
			if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/deny", e.admin, nil); r.status != http.StatusConflict {
				t.Fatalf("second answer: %d %s", r.status, r.body)
			}
		}
	})

	t.Run("a changed argument needs a new approval", func(t *testing.T) {
		first := modernCall(t, e.url, e.admin, echo, `"arguments":{"message":"rm /tmp/a"}`)
		var state string
		var requests map[string]json.RawMessage
		if json.Unmarshal(first["requestState"], &state) != nil || json.Unmarshal(first["inputRequests"], &requests) != nil || len(requests) != 1 || !strings.HasPrefix(state, "approval.") {
			t.Fatalf("first round: %v", first)
		}
		var answers []string
		for id := range requests {
			answers = append(answers, fmt.Sprintf(`%q:{"action":"accept","content":{"approve":true}}`, id))
		}
		retry := modernCall(t, e.url, e.admin, echo, fmt.Sprintf(`"arguments":{"message":"rm -rf /"},"requestState":%q,"inputResponses":{%s}`, state, strings.Join(answers, ",")))
		if string(retry["isError"]) != "true" || !strings.Contains(string(retry["content"]), "changed argument") {
			t.Fatalf("retry with another argument: %v", retry)
		}
		// The held call itself is still there, unanswered, for its own arguments.
		if h := waitHeld(t, e.url, e.admin, "rm /tmp/a"); h.Decision != model.HeldPending {
			t.Fatalf("held call after the refused retry: %+v", h)
		}
	})

	t.Run("held call survives its gateway instance", func(t *testing.T) {
		url2 := secondGateway(t, e)
		body := fmt.Sprintf(`{"tool_name":%q,"params":{"message":"survivor"}}`, echo)
		// The caller gives up on instance 1 (as when it goes away): the call stays held in KV.
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/mcp/invoke", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.admin)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the held invoke answered %d before any approval", resp.StatusCode)
		}
		cancel()
		h := waitHeld(t, url2, e.admin, "survivor")
		if r := httpDo(t, http.MethodPost, url2+"/api/v1/approvals/"+h.ID+"/approve", e.admin, map[string]string{"reason": "looked at it"}); r.status != http.StatusOK {
			t.Fatalf("approve on instance 2: %d %s", r.status, r.body)
		}
		r := rawDo(t, http.MethodPost, url2+"/mcp/invoke", body, map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json"})
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"success":true`) || !strings.Contains(string(r.body), "survivor") {
			t.Fatalf("retry on instance 2: %d %s", r.status, r.body)
		}
	})

	t.Run("a named approver decides, another key cannot", func(t *testing.T) {
		bob := e.createKey(t, model.KeyCreateRequest{Name: "bob", Scopes: []string{"call"}})
		eve := e.createKey(t, model.KeyCreateRequest{Name: "eve", Scopes: []string{"call"}})
		r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: 60,
			Rules: []model.GatewayApprovalRule{{Tool: echo, Decision: model.ApprovalAsk, Approvers: []string{"key:" + bob.ID}}}})
		if r.status != http.StatusOK {
			t.Fatalf("PUT rules: %d %s", r.status, r.body)
		}
		done := make(chan string, 1)
		go func() {
			res, err := plain.CallTool(ctxT(t, time.Minute), &mcp.CallToolParams{Name: echo, Arguments: map[string]any{"message": "for bob"}})
			if err != nil {
				done <- "error: " + err.Error()
				return
			}
			done <- textOf(res)
		}()
		h := waitHeld(t, e.url, bob.Key, "for bob") // a call-scope key that the rule names sees it
		if r := httpDo(t, http.MethodGet, e.url+"/api/v1/approvals", eve.Key, nil); r.status != http.StatusOK || strings.Contains(string(r.body), h.ID) {
			t.Fatalf("eve's list: %d %s", r.status, r.body)
		}
		// Not hers to decide, nor to know of: as a call never held.
		if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", eve.Key, nil); r.status != http.StatusNotFound {
			t.Fatalf("eve approving: %d %s", r.status, r.body)
		}
		if r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", bob.Key, model.ApprovalRules{}); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "UNAUTHORIZED") {
			t.Fatalf("bob replacing the rules: %d %s, want 403 UNAUTHORIZED", r.status, r.body)
		}
		if r := httpDo(t, http.MethodGet, e.url+"/api/v1/approvals/rules", bob.Key, nil); r.status != http.StatusForbidden || strings.Contains(string(r.body), "approvers") {
			t.Fatalf("bob reading the rules (they name principals): %d %s, want 403", r.status, r.body)
		}
		if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", bob.Key, nil); r.status != http.StatusOK {
			t.Fatalf("bob approving: %d %s", r.status, r.body)
		}
		if got := <-done; got != "for bob" {
			t.Fatalf("released call: %s", got)
		}
	})

	t.Run("a rule may name a tool as its server does", func(t *testing.T) {
		// "files.remove" is listed as <slug>__files_remove_<hash> (a dot is
		// not allowed in a namespaced name): a deny rule written with the
		// server's own name denies it all the same, at the gateway and on
		// the bus, where a rule naming neither name would not.
		if res, err := callTool(t, plain.ClientSession, slug+"__add_tool", map[string]any{"message": "files.remove"}); err != nil || res.IsError {
			t.Fatalf("add_tool: %v %v", textOf(res), err)
		}
		var listed *mcp.Tool
		waitList(t, plain.ClientSession, 30*time.Second, "files.remove listed", func(m map[string]*mcp.Tool) bool {
			listed = byOrigin(m, slug, "files.remove")
			return listed != nil
		})
		if listed.Name == slug+"__files.remove" {
			t.Fatalf("listed as %s: the test needs a name that differs from the server's", listed.Name)
		}
		// Before: no rule names it, it runs.
		if res, err := callTool(t, plain.ClientSession, listed.Name, map[string]any{}); err != nil || res.IsError {
			t.Fatalf("%s before the rule: %s %v", listed.Name, textOf(res), err)
		}
		r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: 60,
			Rules: []model.GatewayApprovalRule{{Tool: slug + "__files.*", Decision: model.ApprovalDeny}, {Tool: echo, Decision: model.ApprovalAsk}}})
		if r.status != http.StatusOK {
			t.Fatalf("PUT rules: %d %s", r.status, r.body)
		}
		defer setRules(60)
		res, err := callTool(t, plain.ClientSession, listed.Name, map[string]any{})
		if err != nil || !res.IsError || !strings.Contains(textOf(res), "deny") {
			t.Fatalf("%s under a deny rule on its server's name, over /mcp: %s %v", listed.Name, textOf(res), err)
		}
		// The runner's check (an operator's call on the bus) reads the rules
		// from its KV watch: wait until it has them.
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			_, err := e.st.Client.Call(ctxT(t, 10*time.Second), slug, "files.remove", json.RawMessage(`{}`), nil)
			return err != nil && strings.Contains(err.Error(), "deny"), fmt.Sprintf("over the bus: %v", err)
		})
	})

	t.Run("timeout denies", func(t *testing.T) {
		setRules(1)
		start := time.Now()
		res, err := callTool(t, plain.ClientSession, echo, map[string]any{"message": "nobody looks"})
		if err != nil || !res.IsError || !strings.Contains(textOf(res), "nobody approved") || time.Since(start) < time.Second {
			t.Fatalf("after %s: %+v %v", time.Since(start), res, err)
		}
	})
}

// prompts records the approval forms a client was shown.
type prompts struct {
	mu   sync.Mutex
	seen []*mcp.ElicitParams
}

func (p *prompts) answer(approve bool) func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		p.mu.Lock()
		p.seen = append(p.seen, req.Params)
		p.mu.Unlock()
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": approve}}, nil
	}
}

// wantAsked checks the client was shown one approval form naming tool.
func (p *prompts) wantAsked(t *testing.T, tool string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) != 1 || !strings.Contains(p.seen[0].Message, tool) || !strings.Contains(fmt.Sprint(p.seen[0].RequestedSchema), "approve") {
		t.Fatalf("approval forms shown: %d %+v", len(p.seen), p.seen)
	}
}

// connectAsker connects a go-sdk client that declares elicitation.
func connectAsker(t *testing.T, url, key, version string, h func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession {
	t.Helper()
	mc := mcp.NewClient(&mcp.Implementation{Name: "approver", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: h})
	tr := &mcp.StreamableClientTransport{Endpoint: url + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &authTransport{key: key, base: http.DefaultTransport}}}
	cs, err := mc.Connect(ctxT(t, 30*time.Second), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// waitHeld polls GET /api/v1/approvals until a call whose arguments
// contain marker is held.
func waitHeld(t *testing.T, url, key, marker string) model.HeldCall {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := httpDo(t, http.MethodGet, url+"/api/v1/approvals", key, nil)
		var out model.ApprovalsListReply
		if r.status == http.StatusOK && json.Unmarshal(r.body, &out) == nil {
			for _, h := range out.Calls {
				if strings.Contains(string(h.Arguments), marker) {
					return h
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no held call with %q: %d %s", marker, r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// modernRaw sends one raw tools/call of 2026-07-28 from a client that
// declares elicitation and returns the HTTP answer as it is.
func modernRaw(t *testing.T, url, key, tool, params string) reply {
	t.Helper()
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{%s,"name":%q,%s}}`, meta, tool, params)
	return rawDo(t, http.MethodPost, url+"/mcp", body, map[string]string{
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer " + key, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
	})
}

// modernCall sends one raw tools/call of 2026-07-28 from a client that
// declares elicitation and returns its result.
func modernCall(t *testing.T, url, key, tool, params string) map[string]json.RawMessage {
	t.Helper()
	r := modernRaw(t, url, key, tool, params)
	data := string(r.body)
	if i := strings.Index(data, "data: "); i >= 0 { // an event stream: its first message
		data, _, _ = strings.Cut(data[i+len("data: "):], "\n")
	}
	var msg struct {
		Result map[string]json.RawMessage `json:"result"`
		Error  json.RawMessage            `json:"error"`
	}
	if err := json.Unmarshal([]byte(data), &msg); err != nil || msg.Error != nil {
		t.Fatalf("tools/call: HTTP %d %s", r.status, r.body)
	}
	return msg.Result
}

// secondGateway starts another gateway instance on e's bus, as the gateway
// identity, and returns its URL.
func secondGateway(t *testing.T, e *mcpEnv) string {
	t.Helper()
	nc, err := e.st.ConnectAs("test-gateway-approvals", access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g2, err := gateway.New(ctx, nc, gateway.Options{Addr: "127.0.0.1:0", DataDir: t.TempDir(),
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g2.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("the second gateway did not stop")
		}
	})
	return "http://" + g2.Addr()
}

// TestTaskToolCheckedBeforeTheRules: POST /api/v1/tasks looks the tool up
// as /mcp/invoke does before any approval rule: a tool the key's filter
// hides (or that does not exist) is NOT_FOUND, without telling the rules or
// holding a call for an approver, and the catalog, not the body's "server",
// says whose tool it is.
func TestTaskToolCheckedBeforeTheRules(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	slug := e.enable(t, testServerConfig("guarded"))
	echo := slug + "__echo"
	alice := e.createKey(t, model.KeyCreateRequest{Name: "alice", Scopes: []string{"call"}})
	bob := e.createKey(t, model.KeyCreateRequest{Name: "bob", Scopes: []string{"call"}, Tools: model.ToolFilter{Allow: []string{"other__*"}}})
	put := func(rules model.ApprovalRules) {
		t.Helper()
		if r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, rules); r.status != http.StatusOK {
			t.Fatalf("PUT rules: %d %s", r.status, r.body)
		}
	}
	task := func(key string, body map[string]any) reply {
		return httpDo(t, http.MethodPost, e.url+"/api/v1/tasks", key, body)
	}
	args := map[string]any{"message": "x"}

	// A deny rule on a tool bob's filter hides: NOT_FOUND, as on /mcp/invoke.
	put(model.ApprovalRules{TimeoutSeconds: 60, Rules: []model.GatewayApprovalRule{{Tool: echo, Decision: model.ApprovalDeny}}})
	for _, body := range []map[string]any{{"name": echo, "arguments": args}, {"server": slug, "tool": "echo", "arguments": args}} {
		if r := task(bob.Key, body); r.status != http.StatusNotFound || strings.Contains(string(r.body), "approval") {
			t.Fatalf("bob's task %v of a tool his filter hides: %d %s, want 404", body, r.status, r.body)
		}
	}

	// An ask rule for everything: bob's task of a tool that does not exist
	// holds nothing for alice to decide.
	put(model.ApprovalRules{TimeoutSeconds: 60, Rules: []model.GatewayApprovalRule{{Tool: "*", Decision: model.ApprovalAsk, Approvers: []string{"key:" + alice.ID}}}})
	if r := task(bob.Key, map[string]any{"name": "prod__drop_everything", "arguments": map[string]any{"message": "please approve"}}); r.status != http.StatusNotFound {
		t.Fatalf("bob's task of a tool that does not exist: %d %s, want 404", r.status, r.body)
	}
	if r := httpDo(t, http.MethodGet, e.url+"/api/v1/approvals", alice.Key, nil); r.status != http.StatusOK || strings.Contains(string(r.body), "please approve") {
		t.Fatalf("alice's held calls: %d %s", r.status, r.body)
	}

	// The body's server does not pick another server's rule.
	put(model.ApprovalRules{TimeoutSeconds: 60, Rules: []model.GatewayApprovalRule{
		{Tool: "sandbox__*", Decision: model.ApprovalAllow}, {Tool: echo, Decision: model.ApprovalDeny}}})
	for _, body := range []map[string]any{{"name": echo, "arguments": args}, {"name": echo, "server": "sandbox", "arguments": args}} {
		if r := task(alice.Key, body); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "deny") {
			t.Fatalf("alice's task %v of a denied tool: %d %s, want 403", body, r.status, r.body)
		}
	}
	if r := task(alice.Key, map[string]any{"arguments": args}); r.status != http.StatusBadRequest {
		t.Fatalf("a task naming no tool: %d %s, want 400", r.status, r.body)
	}
}
