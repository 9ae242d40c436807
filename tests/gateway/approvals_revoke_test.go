package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// TestRevokedKeyHeldCallsDenied: the calls a key has held for approval are
// denied when the key is revoked, so an approver who decides later cannot
// release them: a durable task asked for before the revocation is not made
// (it would run in the revoked key's name, after its tasks were cancelled),
// and a call waiting on /mcp/invoke is refused.
func TestRevokedKeyHeldCallsDenied(t *testing.T) {
	e := startMCP(t, gateway.Options{})
	slug := e.enable(t, testServerConfig("guarded"))
	echo := slug + "__echo"
	if r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: 60,
		Rules: []model.GatewayApprovalRule{{Tool: echo, Decision: model.ApprovalAsk}}}); r.status != http.StatusOK {
		t.Fatalf("PUT rules: %d %s", r.status, r.body)
	}
	k := e.createKey(t, model.KeyCreateRequest{Name: "leaver", Scopes: []string{model.KeyScopeCall}})
	task, invoke := make(chan reply, 1), make(chan reply, 1)
	go func() {
		task <- httpDo(t, http.MethodPost, e.url+"/api/v1/tasks", k.Key, map[string]any{"name": echo, "arguments": map[string]any{"message": "held task"}})
	}()
	go func() {
		invoke <- httpDo(t, http.MethodPost, e.url+"/mcp/invoke", k.Key, map[string]any{"tool_name": echo, "params": map[string]any{"message": "held invoke"}})
	}()
	held := []model.HeldCall{waitHeld(t, e.url, e.admin, "held task"), waitHeld(t, e.url, e.admin, "held invoke")}
	if r := httpDo(t, http.MethodDelete, e.url+"/api/v1/keys/"+k.ID, e.admin, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	time.Sleep(500 * time.Millisecond) // every instance has been told
	for _, h := range held {
		if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+h.ID+"/approve", e.admin, nil); r.status == http.StatusOK {
			t.Errorf("an admin approved the revoked key's held call %s: %s", h.ID, r.body)
		}
	}
	select {
	case r := <-task:
		if r.status == http.StatusAccepted {
			t.Errorf("the revoked key's task was made: %s", r.body)
		}
	case <-time.After(30 * time.Second):
		t.Error("the revoked key's task request still waits")
	}
	select {
	case r := <-invoke:
		var out struct {
			Success bool `json:"success"`
		}
		if json.Unmarshal(r.body, &out) != nil || out.Success || strings.Contains(string(r.body), `"text":"held invoke"`) {
			t.Errorf("the revoked key's call ran: %d %s", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Error("the revoked key's call still waits")
	}
	var list struct {
		Tasks []model.Task `json:"tasks"`
	}
	if r := httpDo(t, http.MethodGet, e.url+"/api/v1/tasks?all=true", e.admin, nil); json.Unmarshal(r.body, &list) != nil || len(list.Tasks) != 0 {
		t.Errorf("tasks after the revocation: %s", r.body)
	}
}
