package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// sameAsUnknown checks that what a second user got for the first user's id
// is, byte for byte but the id, what it gets for an id nobody holds: the
// answer must not tell that the id exists.
func sameAsUnknown(t *testing.T, what string, theirs, unknown reply, id, unknownID string) {
	t.Helper()
	got := strings.ReplaceAll(string(theirs.body), id, unknownID)
	if theirs.status != unknown.status || got != string(unknown.body) {
		t.Errorf("%s: another's id answers %d %s, an unknown one %d %s", what, theirs.status, theirs.body, unknown.status, unknown.body)
	}
	if theirs.status < 400 && !strings.Contains(string(theirs.body), `"error"`) {
		t.Errorf("%s: another's id answers %d %s", what, theirs.status, theirs.body)
	}
}

// TestSecondUserAgainstTheFirst: bob, a key with the same scopes as
// alice's, goes after what is alice's over /mcp and REST: her session
// (each HTTP method), her task by every verb of both eras, her held call
// and its approval round. Nothing of hers is reached or changed, and every
// answer is the one an id that does not exist gets.
func TestSecondUserAgainstTheFirst(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	slug := e.enable(t, testServerConfig("shared"))
	echo, sleep := slug+"__echo", slug+"__sleep"
	alice := e.createKey(t, model.KeyCreateRequest{Name: "alice", Scopes: []string{"call"}})
	bob := e.createKey(t, model.KeyCreateRequest{Name: "bob", Scopes: []string{"call"}})
	invoke := func(key, tool, args string) reply {
		return httpDo(t, http.MethodPost, e.url+"/mcp/invoke", key, map[string]any{"tool_name": tool, "params": json.RawMessage(args)})
	}
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := invoke(alice.Key, echo, `{"message":"up"}`)
		return r.status == http.StatusOK, fmt.Sprintf("alice's echo: %d %s", r.status, r.body)
	})

	t.Run("her session", func(t *testing.T) {
		a := openSession(t, e.url, alice.Key)
		hdr := func(key string) map[string]string {
			return map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
				"Authorization": "Bearer " + key, "Mcp-Session-Id": a.sid, "Mcp-Protocol-Version": "2025-11-25"}
		}
		for _, req := range []struct{ method, body string }{
			{http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"mcpbus://` + slug + `/test:%2F%2Fgreeting"}}`},
			{http.MethodPost, `{"jsonrpc":"2.0","id":4,"method":"tasks/list","params":{}}`},
			{http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`},
			{http.MethodDelete, ""},
		} {
			if r := rawDo(t, req.method, e.url+"/mcp", req.body, hdr(bob.Key)); r.status != http.StatusNotFound {
				t.Errorf("bob's %s %s on alice's session: %d %s, want 404", req.method, req.body, r.status, r.body)
			}
		}
		// Her GET stream: the answer's head is enough (a stream would stay open).
		req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, e.url+"/mcp", nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr(bob.Key) {
			req.Header.Set(k, v)
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob's GET stream of alice's session: %d, want 404", resp.StatusCode)
		}
		// Still hers.
		a.rpc(t, "tasks/list", "", "").ok(t, "alice's session after bob's attempts")
		a.close(t)
	})

	t.Run("her task", func(t *testing.T) {
		var task model.Task
		r := httpDo(t, http.MethodPost, e.url+"/api/v1/tasks", alice.Key, map[string]any{"name": sleep, "arguments": map[string]any{"ms": 60000}})
		if r.status != http.StatusAccepted {
			t.Fatalf("alice's task: %d %s", r.status, r.body)
		}
		r.decode(t, &task)
		unknown := uuid.NewString()
		for _, v := range []struct{ method, path string }{
			{http.MethodGet, "/api/v1/tasks/%s"}, {http.MethodGet, "/api/v1/tasks/%s/result?wait=1s"},
			{http.MethodGet, "/api/v1/tasks/%s/events"}, {http.MethodDelete, "/api/v1/tasks/%s"},
		} {
			sameAsUnknown(t, "REST "+v.method+" "+v.path,
				httpDo(t, v.method, e.url+fmt.Sprintf(v.path, task.ID), bob.Key, nil),
				httpDo(t, v.method, e.url+fmt.Sprintf(v.path, unknown), bob.Key, nil), task.ID, unknown)
		}
		legacy := openSession(t, e.url, bob.Key)
		modern := &taskClient{url: e.url, key: bob.Key}
		for _, c := range []struct {
			era    string
			client *taskClient
			verbs  []string
		}{{"2025-11-25", legacy, []string{"tasks/get", "tasks/result", "tasks/cancel"}}, {"2026-07-28", modern, []string{"tasks/get", "tasks/cancel", "tasks/update"}}} {
			for _, verb := range c.verbs {
				params := func(id string) string { return fmt.Sprintf(`"taskId":%q`, id) }
				if verb == "tasks/update" {
					params = func(id string) string { return fmt.Sprintf(`"taskId":%q,"inputResponses":{}`, id) }
				}
				theirs, _ := json.Marshal(c.client.rpc(t, verb, "", params(task.ID)))
				none, _ := json.Marshal(c.client.rpc(t, verb, "", params(unknown)))
				sameAsUnknown(t, c.era+" "+verb, reply{status: 400, body: theirs}, reply{status: 400, body: none}, task.ID, unknown)
			}
		}
		var still model.Task
		r = httpDo(t, http.MethodGet, e.url+"/api/v1/tasks/"+task.ID, alice.Key, nil)
		if r.decode(t, &still); still.State != model.TaskWorking {
			t.Errorf("alice's task after bob's attempts: %d %s", r.status, r.body)
		}
		httpDo(t, http.MethodDelete, e.url+"/api/v1/tasks/"+task.ID, alice.Key, nil)
	})

	t.Run("her held call and its approval round", func(t *testing.T) {
		if r := httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{TimeoutSeconds: 120,
			Rules: []model.GatewayApprovalRule{{Tool: echo, Decision: model.ApprovalAsk}}}); r.status != http.StatusOK {
			t.Fatalf("PUT rules: %d %s", r.status, r.body)
		}
		defer httpDo(t, http.MethodPut, e.url+"/api/v1/approvals/rules", e.admin, model.ApprovalRules{})
		const args = `"arguments":{"message":"alice's secret plan"}`
		first := modernCall(t, e.url, alice.Key, echo, args)
		var state string
		var requests map[string]json.RawMessage
		if json.Unmarshal(first["requestState"], &state) != nil || json.Unmarshal(first["inputRequests"], &requests) != nil || len(requests) != 1 {
			t.Fatalf("alice's first round: %v", first)
		}
		id, ok := strings.CutPrefix(state, "approval.")
		if !ok {
			t.Fatalf("alice's requestState %q names no held call", state)
		}
		var answers []string
		for rid := range requests {
			answers = append(answers, fmt.Sprintf(`%q:{"action":"accept","content":{"approve":true}}`, rid))
		}
		retry := fmt.Sprintf(`%s,"requestState":%q,"inputResponses":{%s}`, args, state, strings.Join(answers, ","))

		// Bob replays her round with her arguments and approves: it is not
		// his call, so nothing runs and her call is not decided.
		res := modernCall(t, e.url, bob.Key, echo, retry)
		if string(res["isError"]) != "true" || strings.Contains(string(res["content"]), "secret plan") {
			t.Errorf("bob's retry of alice's approval round: %v", res)
		}
		if h := waitHeld(t, e.url, e.admin, "secret plan"); h.ID != id || h.Decision != model.HeldPending {
			t.Errorf("alice's held call after bob's retry: %+v", h)
		}
		// Nor may he see, approve or deny it by id; the answers are those of
		// an id never held.
		if r := httpDo(t, http.MethodGet, e.url+"/api/v1/approvals", bob.Key, nil); r.status != http.StatusOK || strings.Contains(string(r.body), id) {
			t.Errorf("bob's list of held calls: %d %s", r.status, r.body)
		}
		unknown := strings.ReplaceAll(uuid.NewString(), "-", "")
		for _, verb := range []string{"approve", "deny"} {
			sameAsUnknown(t, "bob's "+verb,
				httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+id+"/"+verb, bob.Key, nil),
				httpDo(t, http.MethodPost, e.url+"/api/v1/approvals/"+unknown+"/"+verb, bob.Key, nil), id, unknown)
		}
		if h := waitHeld(t, e.url, e.admin, "secret plan"); h.Decision != model.HeldPending {
			t.Errorf("alice's held call after bob's decisions: %+v", h)
		}
		// Her own answer still decides it, once.
		res = modernCall(t, e.url, alice.Key, echo, retry)
		if string(res["isError"]) == "true" || !strings.Contains(string(res["content"]), "secret plan") {
			t.Errorf("alice's own retry: %v", res)
		}
	})
}

// TestHiddenServerIsNotFoundAsNoServer: a key whose tool filter allows
// none of a server's tools gets, on its own authorizations of that server
// (/api/v1/me/authorizations/{id}, every verb), the answer a server that
// does not exist gets, byte for byte but the name, however it spells the
// name: whitespace around it (trimmed before the lookup) must not tell the
// two apart.
func TestHiddenServerIsNotFoundAsNoServer(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	slug := e.enable(t, testServerConfig("hidden"))
	bob := e.createKey(t, model.KeyCreateRequest{Name: "bob", Scopes: []string{"call"}, Tools: model.ToolFilter{Allow: []string{"elsewhere__*"}}})
	const unknown = "nosuchserver"
	for _, spell := range []string{"%s", "%%20%s", "%s%%20", "%%09%s"} {
		for _, v := range []struct {
			method, path string
			body         any
		}{
			{http.MethodPost, "/api/v1/me/authorizations/%s", nil},
			{http.MethodPost, "/api/v1/me/authorizations/%s/continue", map[string]string{"flow": "x"}},
			{http.MethodPut, "/api/v1/me/authorizations/%s", map[string]any{"headers": map[string]string{"X-Api-Key": "k"}}},
			{http.MethodDelete, "/api/v1/me/authorizations/%s", nil},
		} {
			theirs := httpDo(t, v.method, e.url+fmt.Sprintf(v.path, fmt.Sprintf(spell, slug)), bob.Key, v.body)
			none := httpDo(t, v.method, e.url+fmt.Sprintf(v.path, fmt.Sprintf(spell, unknown)), bob.Key, v.body)
			sameAsUnknown(t, fmt.Sprintf("%s %s (%q)", v.method, v.path, spell), theirs, none, slug, unknown)
		}
	}
}
