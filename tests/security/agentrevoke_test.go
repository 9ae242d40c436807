package security

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

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// TestRevokedAgentLeavesNothingToItsNamesake: an agent with its own
// credentials on a per-principal server, and a call of it held and then
// approved (its caller gone before the approval, so the approval waits for
// its retry), is revoked; an agent made again with the same name is the
// same principal, agent:<name>, and must get none of it: its identical call
// is held anew rather than released by the old approval, and its read goes
// upstream with no credentials of the old agent (it is refused as an agent
// that has none), whether through a new session or the old one's.
func TestRevokedAgentLeavesNothingToItsNamesake(t *testing.T) {
	var mu sync.Mutex
	var seen []string // the X-User-Key of each tools/call and resources/read upstream
	url := testmcp.ServeHTTP(t, "remote", nil, testmcp.OnMethod(func(method string, r *http.Request) {
		if method == "tools/call" || method == "resources/read" {
			mu.Lock()
			seen = append(seen, method+" "+r.Header.Get("X-User-Key"))
			mu.Unlock()
		}
	}))
	logs := &testkit.LogBuffer{}
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	// The gateway serves approvals.* (the operator's list and decisions).
	st, err := stack.Start(sctx, stack.Options{DataDir: t.TempDir(), NATSPort: -1,
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner:  runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if t.Failed() {
			t.Logf("log tail:\n%s", logs.Tail(6000))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := model.McpConfig{Name: "remote", Enabled: true, Auth: model.ServerAuth{PerPrincipal: true},
		Package: model.Package{Type: model.PackageHTTP, Identifier: url}, Transport: model.Transport{Type: model.TransportHTTP, URL: url}}
	stored, err := st.Client.CreateConfig(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	const name, who = "twin", "agent:twin"
	connect := func() *nats.Conn {
		t.Helper()
		a, err := st.CreateAgent(model.AgentCreateRequest{Name: name, Allow: []string{"remote__*"}})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := connectSeed(t, st, a.SeedFile, a.InboxPrefix, &violations{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	old := connect()
	if _, err := credclient.New(st.Conn, "").Set(ctx, model.CredSetRequest{ServerID: model.PrincipalCredentialID(stored.ID, who), Kind: model.CredPrincipal,
		Credentials: model.Credentials{Headers: map[string]string{"X-User-Key": "key-of-old"}}, Replace: true,
		For: &model.PrincipalOf{ServerID: stored.ID, Principal: who}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.ApplyPrincipalSecrets(ctx, "remote", who); err != nil {
		t.Fatal(err)
	}
	request := func(nc *nats.Conn, subject, body string) *nats.Msg {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = []byte(body)
		// The runner answers a held call early, within this deadline.
		m.Header.Set(bus.HeaderTimeout, "1500")
		r, err := nc.RequestMsg(m, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		return r
	}
	code := func(m *nats.Msg) string { return m.Header.Get("Nats-Service-Error-Code") }
	read := func(nc *nats.Conn) *nats.Msg {
		return request(nc, "mcp.v1.agent."+name+".rpc.remote", `{"method":"resources/read","params":{"uri":"test://greeting"}}`)
	}
	// The old agent's own session upstream, opened with its credentials.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		m := read(old)
		if code(m) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's read never ran: %s %s", code(m), m.Data)
		}
	}

	rules := model.ApprovalRules{TimeoutSeconds: 600, Rules: []model.GatewayApprovalRule{
		{Tool: "remote__echo", Principal: "agent:*", Decision: model.ApprovalAsk}}}
	if _, err := st.Client.SetApprovalRules(ctx, rules); err != nil {
		t.Fatal(err)
	}
	// Held once the runner follows the rules; the caller's deadline ends
	// first, and the record waits for its retry.
	var args string
	for i := 0; ; i++ {
		args = fmt.Sprintf(`{"message":"approved-%d"}`, i)
		m := request(old, "mcp.v1.agent."+name+".call.remote.echo", args)
		if code(m) == "401" && strings.Contains(string(m.Data), "held for approval") {
			break
		}
		if i == 50 {
			t.Fatalf("the call was never held: %s %s", code(m), m.Data)
		}
		time.Sleep(100 * time.Millisecond)
	}
	calls, err := st.Client.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var held model.HeldCall
	for _, c := range calls {
		if c.Principal == who && c.Tool == "remote__echo" {
			held = c
		}
	}
	if held.ID == "" {
		t.Fatalf("the agent's held call is not listed: %+v", calls)
	}
	if _, err := st.Client.DecideApproval(ctx, model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionApprove}); err != nil {
		t.Fatal(err)
	}

	if err := st.RevokeAgent(name); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	mu.Lock()
	before := len(seen)
	mu.Unlock()
	namesake := connect()

	if m := request(namesake, "mcp.v1.agent."+name+".call.remote.echo", args); code(m) != "401" || !strings.Contains(string(m.Data), "held for approval") {
		t.Errorf("the namesake's identical call: %s %s, want held anew (401, held for approval): the revoked agent's approval released it", code(m), m.Data)
	}
	if m := read(namesake); code(m) != "401" || !strings.Contains(string(m.Data), model.MsgNotAuthorized) {
		t.Errorf("the namesake's read: %s %s, want 401 not authorized: it went upstream as the revoked agent", code(m), m.Data)
	}
	mu.Lock()
	defer mu.Unlock()
	if after := seen[before:]; len(after) > 0 {
		t.Errorf("upstream after the revocation: %q, want nothing (the namesake has no credentials)", after)
	}
}

// TestRevokedAgentsHeldCallDenialIsAudited: revoking an agent denies its
// call still waiting for a decision, and that denial is in the gateway's
// audit trail as any other (approval_decided), naming who revoked the agent
// and why. Before, mcpbus up's host denied it through a store of its own
// with no audit: the denial was only in the log.
func TestRevokedAgentsHeldCallDenialIsAudited(t *testing.T) {
	url := testmcp.ServeHTTP(t, "remote", nil, nil)
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	st, err := stack.Start(sctx, stack.Options{DataDir: t.TempDir(), NATSPort: -1,
		Logger:  slog.New(slog.DiscardHandler),
		Runner:  runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := model.McpConfig{Name: "remote", Enabled: true,
		Package: model.Package{Type: model.PackageHTTP, Identifier: url}, Transport: model.Transport{Type: model.TransportHTTP, URL: url}}
	if _, err := st.Client.CreateConfig(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	const name, who = "leaver", "agent:leaver"
	a, err := st.CreateAgent(model.AgentCreateRequest{Name: name, Allow: []string{"remote__*"}})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := connectSeed(t, st, a.SeedFile, a.InboxPrefix, &violations{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rules := model.ApprovalRules{TimeoutSeconds: 600, Rules: []model.GatewayApprovalRule{
		{Tool: "remote__echo", Principal: "agent:*", Decision: model.ApprovalAsk}}}
	if _, err := st.Client.SetApprovalRules(ctx, rules); err != nil {
		t.Fatal(err)
	}
	// The agent's call, held; its caller gives up first (the runner answers
	// a held call early, within the caller's deadline), the record waits.
	for i := 0; ; i++ {
		m := nats.NewMsg("mcp.v1.agent." + name + ".call.remote.echo")
		m.Data = []byte(`{"message":"hi"}`)
		m.Header.Set(bus.HeaderTimeout, "1500")
		r, err := nc.RequestMsg(m, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Header.Get("Nats-Service-Error-Code") == "401" && strings.Contains(string(r.Data), "held for approval") {
			break
		}
		if i == 50 {
			t.Fatalf("the call was never held: %s", r.Data)
		}
		time.Sleep(100 * time.Millisecond)
	}
	calls, err := st.Client.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var held model.HeldCall
	for _, c := range calls {
		if c.Principal == who && c.Decision == model.HeldPending {
			held = c
		}
	}
	if held.ID == "" {
		t.Fatalf("the agent's pending call is not listed: %+v", calls)
	}
	decided := make(chan model.GatewayAuditEvent, 4)
	sub, err := st.Conn.Subscribe("mcp.v1.events.gateway."+model.GatewayHeldDecided, func(m *nats.Msg) {
		var ev model.GatewayAuditEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			decided <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := st.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	// As `mcpbus agents revoke` asks it: the operator, on the bus.
	if err := bus.RequestJSON(ctx, st.Conn, "mcp.v1.agents.revoke", model.AgentRef{Name: name}, nil, 30*time.Second); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	select {
	case ev := <-decided:
		if ev.HeldID != held.ID || ev.Decision != model.HeldDenied || ev.Principal != "operator" || ev.Tool != held.Tool ||
			!strings.Contains(ev.Reason, "revoked") {
			t.Fatalf("audited decision %+v, want the held call denied by the operator, the agent revoked", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked agent's held call was denied with no approval_decided event")
	}
}
