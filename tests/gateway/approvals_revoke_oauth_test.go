package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/jwtissuer"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// TestRevokedSubjectHeldCallsDenied: revoking an OAuth subject's access
// tokens denies the calls it has held for approval, as revoking an API key
// does, so an approver deciding later releases none: the call waiting on
// /mcp/invoke is refused. Another subject's held call still waits.
func TestRevokedSubjectHeldCallsDenied(t *testing.T) {
	const resource = "https://mcp.example.test/mcp"
	iss := jwtissuer.Start(t)
	e := startMCP(t, gateway.Options{OAuth: jwtauth.Options{Issuers: []string{iss.URL()}, Resource: resource}})
	slug := e.enable(t, testServerConfig("guarded"))
	echo := slug + "__echo"
	if r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: 60,
		Rules: []model.GatewayApprovalRule{{Tool: echo, Decision: model.ApprovalAsk}}}); r.status != http.StatusOK {
		t.Fatalf("PUT rules: %d %s", r.status, r.body)
	}
	token := func(sub string) string {
		tok, err := iss.Token(sub, resource, "mcpbus:call")
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	invoke := func(tok, msg string) chan reply {
		ch := make(chan reply, 1)
		go func() {
			ch <- httpDo(t, http.MethodPost, e.url+"/mcp/invoke", tok, map[string]any{"tool_name": echo, "params": map[string]any{"message": msg}})
		}()
		return ch
	}
	leaving, staying := invoke(token("leaver"), "held of the leaver"), invoke(token("stayer"), "held of the stayer")
	gone, kept := waitHeld(t, e.url, e.admin, "held of the leaver"), waitHeld(t, e.url, e.admin, "held of the stayer")
	if r := httpDo(t, http.MethodPost, e.url+"/api/v1/tokens/revoke", e.admin, model.TokenRevokeRequest{Sub: "leaver"}); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	time.Sleep(500 * time.Millisecond) // the denial runs after the answer
	if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+gone.ID+"/approve", e.admin, nil); r.status == http.StatusOK {
		t.Errorf("an admin approved the revoked subject's held call %s: %s", gone.ID, r.body)
	}
	select {
	case r := <-leaving:
		var out struct {
			Success bool `json:"success"`
		}
		if json.Unmarshal(r.body, &out) != nil || out.Success || strings.Contains(string(r.body), `"text":"held of the leaver"`) {
			t.Errorf("the revoked subject's call ran: %d %s", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Error("the revoked subject's call still waits")
	}
	if r := httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+kept.ID+"/approve", e.admin, nil); r.status != http.StatusOK {
		t.Errorf("approving the other subject's held call: %d %s", r.status, r.body)
	}
	select {
	case r := <-staying:
		if !strings.Contains(string(r.body), "held of the stayer") {
			t.Errorf("the other subject's approved call: %d %s", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Error("the other subject's approved call still waits")
	}
}
