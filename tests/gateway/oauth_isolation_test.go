package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/jwtissuer"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// TestOAuthSubjectOfAnotherIssuer: a principal is its issuer and subject
// together. Two trusted issuers may both name a user "alice": the one of
// the second (mallory, who controls that issuer's accounts) reaches none of
// the first's work, and neither does a token whose subject is an API key's
// id: not her /mcp session, nor her tasks over REST or /mcp.
func TestOAuthSubjectOfAnotherIssuer(t *testing.T) {
	t.Parallel()
	const resource = "https://mcp.example.test/mcp"
	first, second := jwtissuer.Start(t), jwtissuer.Start(t)
	e := startMCP(t, gateway.Options{OAuth: jwtauth.Options{Issuers: []string{first.URL(), second.URL()}, Resource: resource}})
	slug := e.enable(t, testServerConfig("shared"))
	token := func(iss *jwtissuer.Issuer, sub string) string {
		tok, err := iss.Token(sub, resource, "mcpbus:call")
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	bob := e.createKey(t, model.KeyCreateRequest{Name: "bob", Scopes: []string{"call"}})
	victims := map[string]string{"alice of the first issuer": token(first, "alice"), "bob's API key": bob.Key}
	attackers := map[string]string{"alice of the first issuer": token(second, "alice"), "bob's API key": token(second, bob.ID)}
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := httpDo(t, http.MethodPost, e.url+"/mcp/invoke", victims["bob's API key"], map[string]any{"tool_name": slug + "__echo", "params": map[string]any{"message": "up"}})
		return r.status == http.StatusOK, fmt.Sprintf("echo: %d %s", r.status, r.body)
	})
	for who, victim := range victims {
		attacker := attackers[who]
		var task model.Task
		r := httpDo(t, http.MethodPost, e.url+"/api/v1/tasks", victim, map[string]any{"name": slug + "__sleep", "arguments": map[string]any{"ms": 60000}})
		if r.status != http.StatusAccepted {
			t.Fatalf("%s: task: %d %s", who, r.status, r.body)
		}
		r.decode(t, &task)
		for _, v := range []struct{ method, path string }{
			{http.MethodGet, "/api/v1/tasks/" + task.ID}, {http.MethodGet, "/api/v1/tasks/" + task.ID + "/result?wait=1s"},
			{http.MethodGet, "/api/v1/tasks/" + task.ID + "/events"}, {http.MethodDelete, "/api/v1/tasks/" + task.ID},
		} {
			if r := httpDo(t, v.method, e.url+v.path, attacker, nil); r.status != http.StatusNotFound {
				t.Errorf("%s: the other issuer's %s %s: %d %s, want 404", who, v.method, v.path, r.status, r.body)
			}
		}
		if r := httpDo(t, http.MethodGet, e.url+"/api/v1/tasks", attacker, nil); r.status != http.StatusOK || strings.Contains(string(r.body), task.ID) {
			t.Errorf("%s: the other issuer's list: %d %s", who, r.status, r.body)
		}
		modern := &taskClient{url: e.url, key: attacker}
		modern.rpc(t, "tasks/get", "", fmt.Sprintf(`"taskId":%q`, task.ID)).refused(t, who+": the other issuer's tasks/get", -32602, "NOT_FOUND")
		modern.rpc(t, "tasks/cancel", "", fmt.Sprintf(`"taskId":%q`, task.ID)).refused(t, who+": the other issuer's tasks/cancel", -32602, "NOT_FOUND")

		s := openSession(t, e.url, victim)
		for _, method := range []string{http.MethodPost, http.MethodDelete} {
			r := rawDo(t, method, e.url+"/mcp", `{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}`,
				map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
					"Authorization": "Bearer " + attacker, "Mcp-Session-Id": s.sid, "Mcp-Protocol-Version": "2025-11-25"})
			if r.status != http.StatusNotFound {
				t.Errorf("%s: the other issuer's %s on the session: %d %s, want 404", who, method, r.status, r.body)
			}
		}
		res := s.rpc(t, "tasks/list", "", "").ok(t, who+": the session after the other issuer's attempts")
		if raw, _ := json.Marshal(res); !strings.Contains(string(raw), task.ID) {
			t.Errorf("%s: the victim's own list %s lacks its task", who, raw)
		}
		var still model.Task
		r = httpDo(t, http.MethodGet, e.url+"/api/v1/tasks/"+task.ID, victim, nil)
		if r.decode(t, &still); still.State != model.TaskWorking {
			t.Errorf("%s: the task after the other issuer's attempts: %d %s", who, r.status, r.body)
		}
		httpDo(t, http.MethodDelete, e.url+"/api/v1/tasks/"+task.ID, victim, nil)
	}
}
