package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// wantRefused asserts that a connect failed with HTTP 401 and a Bearer
// challenge (containing challenge, when set), and nothing else was answered.
func wantRefused(t *testing.T, what string, s *mcpSession, err error, challenge string) {
	t.Helper()
	statuses, challenges := s.http.seen()
	if err == nil {
		t.Fatalf("%s: the MCP client connected (HTTP %v)", what, statuses)
	}
	if len(statuses) == 0 || statuses[0] != http.StatusUnauthorized || slices.ContainsFunc(statuses, func(c int) bool { return c < 300 }) {
		t.Fatalf("%s: HTTP statuses %v (%v), want 401 only", what, statuses, err)
	}
	if len(challenges) == 0 || !strings.HasPrefix(challenges[0], `Bearer realm="mcpbus"`) || !strings.Contains(challenges[0], challenge) {
		t.Errorf("%s: WWW-Authenticate %q, want a Bearer challenge with %q", what, challenges, challenge)
	}
}

// TestMCPAuth: the MCP endpoint refuses connections without a valid key
// (none, garbage, unknown, wrong secret, revoked — also for a session already
// open), a key's tool filter is all it sees and calls, and a key's own rate
// limit answers 429 with Retry-After.
func TestMCPAuth(t *testing.T) {
	t.Parallel()
	// Bad and revoked keys are tried on purpose, more than the throttle of
	// failed authentications allows one address.
	e := startMCP(t, gateway.Options{AuthFailures: 1000})
	for _, name := range []string{"alpha", "beta"} {
		e.enable(t, testServerConfig(name))
	}
	admin := connectMCP(t, e.url, e.admin)
	all := waitList(t, admin.ClientSession, 30*time.Second, "held both servers' echo", func(m map[string]*mcp.Tool) bool {
		return m["alpha__echo"] != nil && m["beta__echo"] != nil
	})

	t.Run("no key", func(t *testing.T) {
		s, err := dialMCP(t, e.url, "")
		wantRefused(t, "no key", s, err, "")
		// The body is the error contract.
		r := httpDo(t, "POST", e.url+"/mcp", "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
		if r.status != http.StatusUnauthorized || r.contract(t).Code != apierr.Unauthorized {
			t.Errorf("POST /mcp without a key: %d %s", r.status, r.body)
		}
	})

	t.Run("bad keys", func(t *testing.T) {
		good := e.createKey(t, model.KeyCreateRequest{Name: "good"})
		wrongSecret := good.Key[:len(good.Key)-4] + "AAAA"
		if wrongSecret == good.Key {
			wrongSecret = good.Key[:len(good.Key)-4] + "BBBB"
		}
		for what, key := range map[string]string{
			"garbage":      "garbage",
			"unknown id":   "mcpbus_0123456789abcdef_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
			"wrong secret": wrongSecret,
		} {
			s, err := dialMCP(t, e.url, key)
			wantRefused(t, what, s, err, `error="invalid_token"`)
		}
		// The good key itself works, and sees every tool.
		s := connectMCP(t, e.url, good.Key)
		if got := listTools(t, s.ClientSession); len(got) != len(all) {
			t.Errorf("an unfiltered key lists %d tools, the admin %d", len(got), len(all))
		}
	})

	t.Run("revoked", func(t *testing.T) {
		k := e.createKey(t, model.KeyCreateRequest{Name: "soon revoked"})
		s := connectMCP(t, e.url, k.Key)
		if got := callText(t, s.ClientSession, "alpha__echo", map[string]any{"message": "before"}); got != "before" {
			t.Fatalf("alpha__echo returned %q", got)
		}
		var revoked model.APIKey
		if err := bus.RequestJSON(ctxT(t, 20*time.Second), e.st.Conn, bus.NewSubjects("").Service("keys", "revoke"),
			model.KeyRevokeRequest{ID: k.ID}, &revoked, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		if !revoked.Revoked() || revoked.ID != k.ID {
			t.Fatalf("revoke returned %+v", revoked)
		}
		// Nothing is pushed to the revoked key's open session: the gateway
		// closes it when the revocation reaches it.
		// The revocation travels through the KV watch: the gateway says when
		// it closed the key's sessions.
		testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
			for line := range strings.Lines(e.logs.String()) {
				if strings.Contains(line, "its MCP sessions were closed") && strings.Contains(line, k.ID) {
					return true, ""
				}
			}
			return false, "the gateway has not closed the revoked key's sessions"
		})
		s.drainListChanged()
		e.enable(t, testServerConfig("after-revoke"))
		select {
		case <-s.listChanged:
			t.Error("the session of a revoked key still receives notifications")
		case <-time.After(1500 * time.Millisecond):
		}
		// The open session is refused from now on.
		_, err := tryListTools(ctxT(t, 20*time.Second), s.ClientSession)
		statuses, _ := s.http.seen()
		if err == nil || statuses[len(statuses)-1] != http.StatusUnauthorized {
			t.Errorf("the open session of a revoked key: list error %v, HTTP statuses %v, want a 401", err, statuses)
		}
		if _, err := callTool(t, s.ClientSession, "alpha__echo", map[string]any{"message": "after"}); err == nil {
			t.Error("the open session of a revoked key could still call a tool")
		}
		s2, err := dialMCP(t, e.url, k.Key)
		wantRefused(t, "revoked key", s2, err, `error="invalid_token"`)
	})

	t.Run("tool filter", func(t *testing.T) {
		k := e.createKey(t, model.KeyCreateRequest{Name: "alpha only",
			Tools: model.ToolFilter{Allow: []string{"alpha__*"}, Deny: []string{"*__crash"}}})
		s := connectMCP(t, e.url, k.Key)
		got := listTools(t, s.ClientSession)
		var want []string
		for name := range all {
			if strings.HasPrefix(name, "alpha__") && name != "alpha__crash" {
				want = append(want, name)
			}
		}
		slices.Sort(want)
		if names := sortedNames(got); !slices.Equal(names, want) {
			t.Fatalf("the filtered key lists %v, want %v", names, want)
		}
		if got := callText(t, s.ClientSession, "alpha__env", map[string]any{"name": "SERVER_ID"}); got != "alpha" {
			t.Errorf("alpha__env returned %q", got)
		}
		for _, name := range []string{"beta__echo", "alpha__crash"} {
			if _, err := callTool(t, s.ClientSession, name, map[string]any{"message": "x"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
				t.Errorf("the filtered key called %s: %v, want unknown tool", name, err)
			}
		}
		// The refused crash never reached alpha: it still answers.
		if got := callText(t, admin.ClientSession, "alpha__echo", map[string]any{"message": "alive"}); got != "alive" {
			t.Errorf("alpha__echo after the refused crash returned %q", got)
		}
		// REST sees through the same filter.
		r := httpDo(t, "GET", e.url+"/mcp/tools", k.Key, nil)
		var rl rest.ToolsReply
		r.decode(t, &rl)
		var restNames []string
		for _, tool := range rl.Tools {
			restNames = append(restNames, tool.Name)
		}
		slices.Sort(restNames)
		if r.status != http.StatusOK || !slices.Equal(restNames, want) {
			t.Errorf("GET /mcp/tools with the filtered key: %d %v, want %v", r.status, restNames, want)
		}
		r = httpDo(t, "POST", e.url+"/mcp/invoke", k.Key, rest.InvokeRequest{ToolName: "beta__echo", Params: json.RawMessage(`{"message":"x"}`)})
		if r.status != http.StatusNotFound {
			t.Errorf("POST /mcp/invoke beta__echo with the filtered key: %d %s, want 404", r.status, r.body)
		}
		// A server outside the filter appears: the admin's session hears of
		// it, the filtered one does not (its view did not change).
		s.drainListChanged()
		admin.drainListChanged()
		e.enable(t, testServerConfig("gamma"))
		waitListChanged(t, admin, 30*time.Second, "held gamma__echo", func(m map[string]*mcp.Tool) bool { return m["gamma__echo"] != nil })
		select {
		case <-s.listChanged:
			t.Error("the filtered session got tools/list_changed for a server it cannot see")
		case <-time.After(2 * time.Second):
		}
		if names := sortedNames(listTools(t, s.ClientSession)); !slices.Equal(names, want) {
			t.Errorf("after gamma appeared the filtered key lists %v, want %v", names, want)
		}
		// A call-scope key has no admin API: authenticated, not allowed (403).
		r = httpDo(t, "GET", e.url+"/api/v1/servers", k.Key, nil)
		if r.status != http.StatusForbidden || !strings.Contains(r.header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
			t.Errorf("GET /api/v1/servers with a call key: %d %q %s", r.status, r.header.Get("WWW-Authenticate"), r.body)
		}
	})

	t.Run("foreign session", func(t *testing.T) {
		// A session id belongs to the key that opened it: another valid key
		// sending it finds no such session, and cannot end it.
		other := e.createKey(t, model.KeyCreateRequest{Name: "intruder"})
		admin := connectMCPAt(t, e.url, e.admin, "2025-11-25") // a client with a session
		sid := admin.ID()
		if sid == "" {
			t.Fatal("the admin session has no Mcp-Session-Id")
		}
		for _, method := range []string{"POST", "DELETE"} {
			req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), method, e.url+"/mcp",
				strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+other.Key)
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s /mcp with another key's session id: %d, want 404", method, resp.StatusCode)
			}
		}
		if got := callText(t, admin.ClientSession, "alpha__echo", map[string]any{"message": "still mine"}); got != "still mine" {
			t.Errorf("the admin session after the intrusion attempt: %q", got)
		}
	})

	t.Run("rate limit", func(t *testing.T) {
		k := e.createKey(t, model.KeyCreateRequest{Name: "slow", Rate: &model.KeyRate{RPS: 1, Burst: 2}})
		invoke := func() reply {
			return httpDo(t, "POST", e.url+"/mcp/invoke", k.Key, rest.InvokeRequest{ToolName: "alpha__echo", Params: json.RawMessage(`{"message":"tick"}`)})
		}
		var statuses []int
		var limited reply
		began := time.Now()
		for range 10 {
			r := invoke()
			statuses = append(statuses, r.status)
			if r.status == http.StatusTooManyRequests {
				limited = r
				break
			}
			if r.status != http.StatusOK {
				t.Fatalf("invoke: %d %s", r.status, r.body)
			}
		}
		t.Logf("statuses until the limit: %v", statuses)
		if limited.status != http.StatusTooManyRequests {
			t.Fatalf("no 429 in %v", statuses)
		}
		// The burst of 2 passes, plus at most one per second the requests took
		// (1 rps): slow calls on a loaded machine refill the bucket.
		passed, refill := len(statuses)-1, int(math.Ceil(time.Since(began).Seconds()))
		if passed < 2 || passed > 2+refill {
			t.Errorf("statuses %v in %s: want the burst of 2 (plus at most %d refilled) to pass, then 429", statuses, time.Since(began), refill)
		}
		if ae := limited.contract(t); ae.Code != apierr.RateLimited {
			t.Errorf("429 body code %s, want %s", ae.Code, apierr.RateLimited)
		}
		secs, err := strconv.Atoi(limited.header.Get("Retry-After"))
		if err != nil || secs < 1 || secs > 2 {
			t.Fatalf("Retry-After %q, want whole seconds 1..2", limited.header.Get("Retry-After"))
		}
		// Other keys are not limited by it.
		if r := httpDo(t, "GET", e.url+"/mcp/tools", e.admin, nil); r.status != http.StatusOK {
			t.Errorf("the admin key after another key hit its limit: %d", r.status)
		}
		// After Retry-After the key may call again.
		time.Sleep(time.Duration(secs) * time.Second)
		if r := invoke(); r.status != http.StatusOK {
			t.Errorf("invoke after Retry-After: %d %s", r.status, r.body)
		}
	})

	t.Run("a filter may name a tool as its server does", func(t *testing.T) {
		// "files.remove" is listed as alpha__files_remove_<hash>: a key whose
		// filter denies alpha__files.* neither sees nor calls it, on /mcp or
		// /mcp/invoke; one that allows only alpha__files.* sees it alone.
		callText(t, admin.ClientSession, "alpha__add_tool", map[string]any{"message": "files.remove"})
		var dotted *mcp.Tool
		waitList(t, admin.ClientSession, 30*time.Second, "files.remove listed", func(m map[string]*mcp.Tool) bool {
			dotted = byOrigin(m, "alpha", "files.remove")
			return dotted != nil
		})
		denied := e.createKey(t, model.KeyCreateRequest{Name: "no files", Tools: model.ToolFilter{Deny: []string{"alpha__files.*"}}})
		s := connectMCP(t, e.url, denied.Key)
		listed := listTools(t, s.ClientSession)
		if listed[dotted.Name] != nil || listed["alpha__echo"] == nil {
			t.Errorf("the key denying alpha__files.* lists %v", sortedNames(listed))
		}
		if _, err := callTool(t, s.ClientSession, dotted.Name, map[string]any{}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Errorf("the key denying alpha__files.* called %s: %v, want unknown tool", dotted.Name, err)
		}
		if r := httpDo(t, "POST", e.url+"/mcp/invoke", denied.Key, rest.InvokeRequest{ToolName: dotted.Name, Params: json.RawMessage(`{}`)}); r.status != http.StatusNotFound {
			t.Errorf("POST /mcp/invoke %s with the key denying alpha__files.*: %d %s, want 404", dotted.Name, r.status, r.body)
		}
		only := e.createKey(t, model.KeyCreateRequest{Name: "files only", Tools: model.ToolFilter{Allow: []string{"alpha__files.*"}}})
		s2 := connectMCP(t, e.url, only.Key)
		if names := sortedNames(listTools(t, s2.ClientSession)); !slices.Equal(names, []string{dotted.Name}) {
			t.Errorf("the key allowing alpha__files.* lists %v, want [%s]", names, dotted.Name)
		}
		if got := callText(t, s2.ClientSession, dotted.Name, map[string]any{}); got != "added tool" {
			t.Errorf("%s with the key allowing alpha__files.*: %q", dotted.Name, got)
		}
		// /mcp/invoke takes the tool by either name.
		for _, name := range []string{dotted.Name, "alpha__files.remove"} {
			if r := httpDo(t, "POST", e.url+"/mcp/invoke", only.Key, rest.InvokeRequest{ToolName: name, Params: json.RawMessage(`{}`)}); r.status != http.StatusOK {
				t.Errorf("POST /mcp/invoke %s with the key allowing alpha__files.*: %d %s", name, r.status, r.body)
			}
			if r := httpDo(t, "POST", e.url+"/mcp/invoke", denied.Key, rest.InvokeRequest{ToolName: name, Params: json.RawMessage(`{}`)}); r.status != http.StatusNotFound {
				t.Errorf("POST /mcp/invoke %s with the key denying alpha__files.*: %d %s, want 404", name, r.status, r.body)
			}
		}
	})
}
