package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// Approvals enforced on the bus (issue 30 item 2): the runner applies the
// gateway's rules to every call that reaches it, for the principal the call
// is made for. An agent (its own NATS identity) is held and told so within
// its deadline, retries once a person approved over REST and runs once; it
// waits while the CLI's subject decides; a denial and the timeout refuse; a
// changed argument needs its own approval; a forged principal header skips
// nothing; a call the gateway held and got approved is not held again at
// the runner; serve-stdio's calls are held; and a chat turn's call, held by
// its profile's rules in the same records, is approved by the CLI's subject.
func TestApprovalsOnTheBus(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	e := c.mcpEnv
	echo := "tm__echo"
	setRules := func(timeout int) {
		t.Helper()
		r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: timeout,
			Rules: []model.GatewayApprovalRule{{Tool: echo, Decision: model.ApprovalAsk}, {Tool: "tm__fail", Decision: model.ApprovalDeny}}})
		if r.status != http.StatusOK {
			t.Fatalf("PUT rules: %d %s", r.status, r.body)
		}
	}
	setRules(60)

	anc := connectAgent(t, e, model.AgentCreateRequest{Name: "bot", Allow: []string{"tm__*"}})
	// busCall calls tm.<tool> on nc's subject with a deadline the runner is
	// told of (Mcp-Timeout-Ms), and returns the result's text or the error.
	busCall := func(nc *nats.Conn, subject, args string, deadline time.Duration, extra nats.Header) (string, *apierr.Error) {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = []byte(args)
		msg.Header = nats.Header{bus.HeaderTimeout: []string{strconv.FormatInt(deadline.Milliseconds(), 10)}}
		for k, v := range extra {
			msg.Header[k] = v
		}
		reply, err := nc.RequestMsg(msg, deadline+5*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer within the deadline: %v", subject, err)
		}
		if e := bus.ReplyError(reply); e != nil {
			return "", e
		}
		var res mcp.CallToolResult
		if err := json.Unmarshal(reply.Data, &res); err != nil {
			t.Fatalf("%s: %s", subject, reply.Data)
		}
		return textOf(&res), nil
	}
	agentEcho := "mcp.v1.agent.bot.call.tm.echo"
	operatorEcho := "mcp.v1.call.tm.echo"
	heldOf := func(err *apierr.Error) model.HeldCall {
		t.Helper()
		if err == nil || err.Code != apierr.Unauthorized || err.Field != approvals.FieldApproval || !strings.Contains(err.Message, "held for approval") {
			t.Fatalf("want the call held past its deadline, got %v", err)
		}
		for _, h := range listHeld(t, e) {
			if strings.Contains(err.Message, h.ID) {
				return h
			}
		}
		t.Fatalf("the error names no listed held call: %s", err.Message)
		return model.HeldCall{}
	}
	decideOnBus := func(id, decision string) { // what `mcpbus approvals approve|deny` sends
		t.Helper()
		var out model.HeldCall
		if err := bus.RequestJSON(ctxT(t, 20*time.Second), e.st.Conn, bus.NewSubjects("").Service("approvals", "decide"),
			model.ApprovalDecideRequest{ID: id, Decision: decision}, &out, 15*time.Second); err != nil {
			t.Fatalf("approvals.decide %s: %v", decision, err)
		}
	}

	t.Run("agent held, approved over REST, runs once", func(t *testing.T) {
		_, err := busCall(anc, agentEcho, `{"message":"agent one"}`, 1500*time.Millisecond, nil)
		h := heldOf(err)
		if h.Principal != "agent:bot" || h.Tool != echo {
			t.Fatalf("held %+v", h)
		}
		if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", e.admin, nil); r.status != http.StatusOK {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		if got, err := busCall(anc, agentEcho, `{"message":"agent one"}`, 10*time.Second, nil); err != nil || got != "agent one" {
			t.Fatalf("the retry after the approval: %q %v", got, err)
		}
		// The approval was used: the same call is held anew.
		_, err = busCall(anc, agentEcho, `{"message":"agent one"}`, time.Second, nil)
		decideOnBus(heldOf(err).ID, model.DecisionDeny)
	})

	t.Run("agent waits, the CLI's subject approves or denies", func(t *testing.T) {
		for _, decision := range []string{model.DecisionApprove, model.DecisionDeny} {
			type result struct {
				text string
				err  *apierr.Error
			}
			done := make(chan result, 1)
			go func() {
				text, err := busCall(anc, agentEcho, `{"message":"wait `+decision+`"}`, 30*time.Second, nil)
				done <- result{text, err}
			}()
			h := waitHeld(t, e.url, e.admin, "wait "+decision)
			decideOnBus(h.ID, decision)
			got := <-done
			switch {
			case decision == model.DecisionApprove && (got.err != nil || got.text != "wait approve"):
				t.Fatalf("approved: %+v", got)
			case decision == model.DecisionDeny && (got.err == nil || got.err.Code != apierr.Unauthorized || !strings.Contains(got.err.Message, "denied")):
				t.Fatalf("denied: %+v", got)
			}
		}
	})

	t.Run("a changed argument needs a new approval", func(t *testing.T) {
		_, err := busCall(anc, agentEcho, `{"message":"a"}`, time.Second, nil)
		a := heldOf(err)
		decideOnBus(a.ID, model.DecisionApprove)
		_, err = busCall(anc, agentEcho, `{"message":"b"}`, time.Second, nil)
		if b := heldOf(err); b.ID == a.ID {
			t.Fatal("another argument found the approved call")
		} else {
			decideOnBus(b.ID, model.DecisionDeny)
		}
		if got, err := busCall(anc, agentEcho, `{"message":"a"}`, 10*time.Second, nil); err != nil || got != "a" {
			t.Fatalf("the approved arguments: %q %v", got, err)
		}
	})

	t.Run("a deny rule refuses", func(t *testing.T) {
		if _, err := busCall(anc, "mcp.v1.agent.bot.call.tm.fail", `{"message":"x"}`, 5*time.Second, nil); err == nil || err.Code != apierr.Unauthorized || !strings.Contains(err.Message, "deny") {
			t.Fatalf("denied by rule: %v", err)
		}
	})

	t.Run("a forged header skips nothing", func(t *testing.T) {
		// The operator (the CLI's identity) has a call approved...
		_, err := busCall(e.st.Conn, operatorEcho, `{"message":"forged"}`, time.Second, nil)
		op := heldOf(err)
		if op.Principal != principal.KindOperator {
			t.Fatalf("the operator's call is held as %q", op.Principal)
		}
		decideOnBus(op.ID, model.DecisionApprove)
		// ...which the agent cannot use by claiming to be the operator or
		// saying the call is approved: its subject names it.
		forged := nats.Header{principal.Header: []string{principal.Operator().Encode()},
			"Mcpbus-Approval": []string{op.ID}, "Mcpbus-Approved": []string{"true"}}
		_, err = busCall(anc, agentEcho, `{"message":"forged"}`, time.Second, forged)
		if h := heldOf(err); h.ID == op.ID || h.Principal != "agent:bot" {
			t.Fatalf("the forged call was taken for the operator's: %+v", h)
		} else {
			decideOnBus(h.ID, model.DecisionDeny)
		}
		if got, err := busCall(e.st.Conn, operatorEcho, `{"message":"forged"}`, 10*time.Second, nil); err != nil || got != "forged" {
			t.Fatalf("the operator's approved call: %q %v", got, err)
		}
	})

	t.Run("the gateway's approved call is not held again at the runner", func(t *testing.T) {
		done := make(chan reply, 1)
		go func() {
			done <- httpDo(t, http.MethodPost, e.url+"/mcp/invoke", e.admin, map[string]any{"tool_name": echo, "params": map[string]any{"message": "via rest"}})
		}()
		h := waitHeld(t, e.url, e.admin, "via rest")
		if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", e.admin, nil); r.status != http.StatusOK {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		got := <-done
		var out rest.InvokeReply
		got.decode(t, &out)
		if got.status != http.StatusOK || !out.Success || !strings.Contains(string(got.body), "via rest") {
			t.Fatalf("invoke after the approval: %d %s", got.status, got.body)
		}
		if held := listHeld(t, e); len(held) != 0 {
			t.Fatalf("still held after the call ran: %+v", held)
		}
	})

	t.Run("serve-stdio's call is held", func(t *testing.T) {
		// The aggregate as serve-stdio makes it: no approvals of its own, its
		// calls on the bus as the operator's connection.
		ctx := ctxT(t, 2*time.Minute)
		agg, err := mcpserver.New(ctx, e.st.Conn, mcpserver.Options{NoAuth: true, Local: true, CallTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(agg.Close)
		st, ct := mcp.NewInMemoryTransports()
		p := auth.Anonymous()
		p.Name = "serve-stdio" // as the command makes it
		go func() { _ = agg.Serve(ctx, p, st) }()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-client", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		res, err := callTool(t, cs, echo, map[string]any{"message": "stdio"})
		if err == nil && !res.IsError {
			t.Fatalf("serve-stdio's call ran without approval: %s", textOf(res))
		}
		h := waitHeld(t, e.url, e.admin, `"stdio"`)
		// Its calls carry no principal header: the operator's identity's.
		if h.Principal != principal.KindOperator {
			t.Fatalf("held for %q, want the operator (serve-stdio's identity)", h.Principal)
		}
		if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", e.admin, nil); r.status != http.StatusOK {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		if got := callText(t, cs, echo, map[string]any{"message": "stdio"}); got != "stdio" {
			t.Fatalf("serve-stdio's retry: %q", got)
		}

	})

	t.Run("timeout denies", func(t *testing.T) {
		setRules(2)
		defer setRules(60)
		start := time.Now()
		_, err := busCall(anc, agentEcho, `{"message":"nobody"}`, 30*time.Second, nil)
		if err == nil || err.Code != apierr.Unauthorized || !strings.Contains(err.Message, "nobody approved") || time.Since(start) > 20*time.Second {
			t.Fatalf("after %s: %v", time.Since(start), err)
		}
	})

	t.Run("a chat turn held by its profile, approved by the CLI's subject", func(t *testing.T) {
		c.putProfile(t, "careful", func(b *rest.ProfilePutBody) {
			b.Approval = model.ApprovalPolicy{Rules: []model.ApprovalRule{{Tool: "tm__ech?", Decision: model.ApprovalAsk}}}
		})
		conv := uuid.NewString()
		evs := openSSE(t, c.url+"/api/v1/chat/conversations/"+conv+"/events", c.chat)
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call(echo, `{"message":"from chat"}`)), llmtest.Text("done"))
		if r := httpDo(t, http.MethodPost, c.url+"/api/v1/chat/conversations", c.chat, model.ChatSendRequest{Conversation: conv, Profile: "careful", Message: "echo"}); r.status != http.StatusAccepted {
			t.Fatalf("POST: %d %s", r.status, r.body)
		}
		evs.until(t, time.Minute, func(ev model.ChatEvent) bool {
			return ev.ToolCall != nil && ev.ToolCall.State == model.ToolCallAwaitingApproval
		})
		h := waitHeld(t, e.url, e.admin, "from chat")
		if !strings.HasPrefix(h.Principal, principal.KindKey+":") {
			t.Fatalf("the chat's call is held for %q, want the chat key's principal", h.Principal)
		}
		// Another user neither lists nor decides it.
		other := e.createKey(t, model.KeyCreateRequest{Name: "other", Scopes: []string{model.KeyScopeChat, model.KeyScopeCall}})
		if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", other.Key, nil); r.status != http.StatusNotFound {
			t.Fatalf("another user approving: %d %s (want 404: not theirs to know of)", r.status, r.body)
		}
		decideOnBus(h.ID, model.DecisionApprove)
		got := evs.until(t, time.Minute, isDone)
		if states := toolStates(got); !slices.Equal(states, []string{echo + ":started", echo + ":completed"}) {
			t.Fatalf("tool states %q after the approval", states)
		}
		if held := listHeld(t, e); len(held) != 0 {
			t.Fatalf("held again at the runner: %+v", held)
		}
	})
}

// listHeld is the held calls an admin sees.
func listHeld(t *testing.T, e *mcpEnv) []model.HeldCall {
	t.Helper()
	r := httpDo(t, http.MethodGet, e.url+"/api/v1/approvals", e.admin, nil)
	var out model.ApprovalsListReply
	r.decode(t, &out)
	if r.status != http.StatusOK {
		t.Fatalf("GET approvals: %d %s", r.status, r.body)
	}
	return out.Calls
}
