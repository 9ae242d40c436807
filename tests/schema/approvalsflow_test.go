package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// driveApprovals drives every verb of mcp.v1.approvals.* on the bus: a rule
// that asks for server's echo (rules-put), a POST /mcp/invoke the gateway
// holds (listed by approvals.list), its approval (approvals.decide, then a
// second decision refused as CONFLICT), and the rules read and restored.
func driveApprovals(t *testing.T, ctx context.Context, sys *stack.Stack, server string) {
	t.Helper()
	cl := sys.Client
	before, err := cl.ApprovalRules(ctx)
	if err != nil {
		t.Fatalf("approvals.rules-get: %v", err)
	}
	tool := server + "__echo"
	ask := model.ApprovalRules{TimeoutSeconds: 60, Rules: []model.GatewayApprovalRule{
		{Tool: tool, Decision: model.ApprovalAsk, Approvers: []string{"key:*"}}}}
	if got, err := cl.SetApprovalRules(ctx, ask); err != nil || !reflect.DeepEqual(got, ask) {
		t.Fatalf("approvals.rules-put: %+v, %v", got, err)
	}
	key, err := os.ReadFile(sys.Gateway.AdminKeyPath())
	if err != nil {
		t.Fatalf("reading the admin key: %v", err)
	}

	// Another gateway instance may have answered rules-put: until this one
	// has followed the rules through KV, a call goes through unheld; retry.
	var held model.HeldCall
	var result chan invokeOutcome
	for attempt := 0; held.ID == ""; attempt++ {
		if attempt == 5 {
			t.Fatal("no call of " + tool + " was held after 5 attempts")
		}
		ch := make(chan invokeOutcome, 1)
		result = ch
		go func() {
			ch <- invoke(ctx, sys.Gateway.Addr(), strings.TrimSpace(string(key)), tool, `{"message":"held"}`)
		}()
		held = waitHeld(t, ctx, cl, tool, result)
	}
	if held.Decision != model.HeldPending || held.Server != server || held.ArgsSHA256 == "" {
		t.Fatalf("approvals.list: the held call is %+v", held)
	}
	decided, err := cl.DecideApproval(ctx, model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionApprove, Reason: "schema test"})
	if err != nil || decided.Decision != model.HeldApproved || decided.ID != held.ID {
		t.Fatalf("approvals.decide: %+v, %v", decided, err)
	}
	select {
	case out := <-result:
		if out.err != nil || !out.Success {
			t.Fatalf("the approved call: %+v, %v", out.invokeReply, out.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the approved call did not answer within 30s")
	}
	_, err = cl.DecideApproval(ctx, model.ApprovalDecideRequest{ID: held.ID, Decision: model.DecisionDeny})
	wantCode(t, "a second decision of a held call", err, apierr.Conflict)

	if got, err := cl.SetApprovalRules(ctx, before); err != nil || !reflect.DeepEqual(got, before) {
		t.Fatalf("approvals.rules-put (restoring the rules): %+v, %v", got, err)
	}
}

// waitHeld polls approvals.list until a call of tool is pending; the zero
// HeldCall when the invoke answered first (it was not held).
func waitHeld(t *testing.T, ctx context.Context, cl *client.Client, tool string, result chan invokeOutcome) model.HeldCall {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		calls, err := cl.Approvals(ctx)
		if err != nil {
			t.Fatalf("approvals.list: %v", err)
		}
		for _, h := range calls {
			if h.Tool == tool {
				return h
			}
		}
		select {
		case out := <-result:
			if out.err != nil {
				t.Fatalf("POST /mcp/invoke %s: %v", tool, out.err)
			}
			return model.HeldCall{}
		default:
		}
	}
	t.Fatalf("no held call of %s listed within 10s", tool)
	return model.HeldCall{}
}

// invokeReply is the part of a POST /mcp/invoke answer the test reads.
type invokeReply struct {
	Success bool   `json:"success"`
	Error   string `json:"error"`
}

// invokeOutcome is a POST /mcp/invoke's answer or why there is none.
type invokeOutcome struct {
	invokeReply
	err error
}

// invoke calls tool through the gateway's REST API as the admin key.
func invoke(ctx context.Context, addr, key, tool, params string) invokeOutcome {
	body := fmt.Sprintf(`{"tool_name":%q,"params":%s}`, tool, params)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/mcp/invoke", bytes.NewBufferString(body))
	if err != nil {
		return invokeOutcome{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		return invokeOutcome{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return invokeOutcome{err: err}
	}
	var out invokeOutcome
	if err := json.Unmarshal(data, &out.invokeReply); err != nil {
		return invokeOutcome{err: fmt.Errorf("HTTP %d %s: %w", resp.StatusCode, data, err)}
	}
	return out
}
