package gateway

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// The REST API's answers to bad input, route by route, against the whole
// stack: every refusal is the error contract with the status of its code
// (or 413/415/405 from the edge), names the field at fault, and changes
// nothing.

// startREST is start without the per-key rate limit: the tables below send
// more requests a second than a client should.
func startREST(t *testing.T) *env {
	t.Helper()
	return startWith(t, nil, gateway.Options{RateRPS: 1e4, RateBurst: 1e4})
}

// TestRESTMalformedBodies sends each route that reads a JSON body bodies
// that are not what it takes. Routes that resolve the URL's object first
// answer 404 for an unknown one whatever the body; the rest 400
// VALIDATION_ERROR, with the field when the body names one.
func TestRESTMalformedBodies(t *testing.T) {
	t.Parallel()
	e := startREST(t)
	const unknownTask = "00000000-0000-4000-8000-000000000001"
	routes := []struct {
		method, path string
		// notFound: the URL names nothing, which is answered first.
		notFound bool
		// typed is a body with a field of the wrong type, and field its name.
		typed, field string
	}{
		{"POST", "/mcp/invoke", false, `{"tool_name": 5}`, "tool_name"},
		{"POST", "/api/v1/tasks", false, `{"name": ["a"]}`, "name"},
		{"POST", "/api/v1/servers", false, `{"config": {"name": 5}}`, "config.name"},
		{"PUT", "/api/v1/servers/nosuch", false, `{"config": {"enabled": "yes"}}`, "config.enabled"},
		{"POST", "/api/v1/servers/nosuch/rollback", false, `{"version": "two"}`, "version"},
		{"PUT", "/api/v1/servers/nosuch/credentials", true, "", ""},
		{"POST", "/api/v1/servers/nosuch/pins/approve", true, "", ""},
		{"POST", "/api/v1/registry/plan", false, `{"name": {}}`, "name"},
		{"PUT", "/api/v1/me/authorizations/nosuch", true, "", ""},
		{"POST", "/api/v1/me/authorizations/nosuch/continue", true, "", ""},
		{"POST", "/api/v1/keys", false, `{"name": "k", "scopes": "call"}`, "scopes"},
		{"POST", "/api/v1/tokens/revoke", false, `{"jti": 1}`, "jti"},
		{"POST", "/api/v1/agents", false, `{"name": 5}`, "name"},
		{"POST", "/api/v1/approvals/" + unknownTask + "/approve", false, `{"reason": 1}`, "reason"},
		{"POST", "/api/v1/approvals/" + unknownTask + "/deny", false, `{"reason": []}`, "reason"},
		{"PUT", "/api/v1/approvals/rules", false, `{"timeout_seconds": "60"}`, "timeout_seconds"},
		{"POST", "/api/v1/chat/conversations", false, `{"profile": 5}`, "profile"},
		{"POST", "/api/v1/chat/conversations/" + unknownTask + "/messages", false, `{"message": 5}`, "message"},
		{"POST", "/api/v1/chat/conversations/" + unknownTask + "/approvals/x", false, `{"decision": true}`, "decision"},
		{"POST", "/api/v1/chat/conversations/" + unknownTask + "/inputs/x", false, `{"action": 1}`, "action"},
		{"PUT", "/api/v1/chat/profiles/nosuch", false, `{"provider": 1}`, "provider"},
	}
	bad := []struct{ name, body, field string }{
		{"not JSON", "not json", ""},
		{"an array", "[]", ""},
		{"a string", `"str"`, ""},
		{"a number", "123", ""},
		{"an unknown field", `{"zzz_unknown": 1}`, "zzz_unknown"},
		{"data after the value", `{}{`, ""},
		{"an unclosed object", `{"a":`, ""},
	}
	hdr := map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json"}
	for _, rt := range routes {
		cases := bad
		if rt.typed != "" {
			cases = append(slices.Clone(bad), struct{ name, body, field string }{"a wrongly typed field", rt.typed, rt.field})
		}
		for _, c := range cases {
			what := rt.method + " " + rt.path + " with " + c.name
			r := rawDo(t, rt.method, e.url+rt.path, c.body, hdr)
			if rt.notFound {
				wantCode(t, what, r, http.StatusNotFound, apierr.NotFound)
				continue
			}
			if rt.path == "/mcp/invoke" { // its own envelope, the contract in details
				var env struct {
					ErrorType string       `json:"error_type"`
					Details   apierr.Error `json:"details"`
				}
				r.decode(t, &env)
				if r.status != http.StatusBadRequest || env.ErrorType != string(apierr.Validation) || env.Details.Field != c.field {
					t.Errorf("%s: %d %s, want 400 VALIDATION_ERROR field %q", what, r.status, r.body, c.field)
				}
				continue
			}
			if r.status != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", what, r.status, r.body)
				continue
			}
			if got := r.contract(t); got.Code != apierr.Validation || got.Field != c.field {
				t.Errorf("%s: %s field %q, want VALIDATION_ERROR field %q (%s)", what, got.Code, got.Field, c.field, r.body)
			}
		}
	}
}

// TestRESTTaskFields: a task body missing half of server and tool names
// the half that is missing.
func TestRESTTaskFields(t *testing.T) {
	t.Parallel()
	e := startREST(t)
	for _, c := range []struct{ body, field string }{
		{`{}`, "name"},
		{`{"server": "s"}`, "tool"},
		{`{"tool": "t"}`, "server"},
		{`{"name": "  "}`, "name"},
	} {
		wantInvalid(t, "POST /api/v1/tasks "+c.body, e.do("POST", "/api/v1/tasks", c.body), c.field)
	}
}

// TestRESTWrongMethods: every API path (/mcp, /mcp/*, /api/v1/*) answers a method it does not take
// 405 in the contract, with Allow naming the ones it does (HEAD with GET).
func TestRESTWrongMethods(t *testing.T) {
	t.Parallel()
	e := startREST(t)
	allowed := map[string][]string{}
	for _, rt := range e.g.Routes() {
		if strings.HasPrefix(rt.Pattern, "/v1/") {
			continue // the OpenAI-compatible routes answer OpenAI error objects
		}
		allowed[rt.Pattern] = append(allowed[rt.Pattern], rt.Method)
		if rt.Method == "GET" {
			allowed[rt.Pattern] = append(allowed[rt.Pattern], "HEAD")
		}
	}
	fill := strings.NewReplacer("{id}", "x", "{name}", "x", "{call_id}", "x", "{input_id}", "x")
	hdr := map[string]string{"Authorization": "Bearer " + e.admin}
	for pattern, methods := range allowed {
		slices.Sort(methods)
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if slices.Contains(methods, m) {
				continue
			}
			r := rawDo(t, m, e.url+fill.Replace(pattern), "", hdr)
			what := m + " " + pattern
			wantCode(t, what, r, http.StatusMethodNotAllowed, apierr.Validation)
			if got := strings.Split(r.header.Get("Allow"), ", "); !slices.Equal(got, methods) {
				t.Errorf("%s: Allow %q, want %q", what, r.header.Get("Allow"), methods)
			}
		}
	}
}

// TestRESTRefusalsChangeNothing: a request refused for a bad query
// parameter or an empty body has changed nothing when it is answered.
func TestRESTRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	e := startREST(t)
	cfg := model.McpConfig{Name: "creds", AuthType: model.AuthAPIKey,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio}}
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do("PUT", "/api/v1/servers/creds/credentials", model.Credentials{Env: map[string]string{"GITHUB_TOKEN": "one"}}); r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	secrets := func() model.CredDescription {
		t.Helper()
		var d model.CredDescription
		e.do("GET", "/api/v1/servers/creds/credentials", nil).decode(t, &d)
		return d
	}

	t.Run("credentials with a bad restart", func(t *testing.T) {
		wantInvalid(t, "PUT ?restart=maybe", e.do("PUT", "/api/v1/servers/creds/credentials?restart=maybe",
			model.Credentials{Env: map[string]string{"X_API_KEY": "two"}}), "restart")
		if d := secrets(); d.Has("X_API_KEY") {
			t.Errorf("a refused PUT stored its secret: %+v", d)
		}
		wantInvalid(t, "DELETE ?restart=maybe", e.do("DELETE", "/api/v1/servers/creds/credentials?name=GITHUB_TOKEN&restart=maybe", nil), "restart")
		if d := secrets(); !d.Has("GITHUB_TOKEN") {
			t.Errorf("a refused DELETE removed the secret: %+v", d)
		}
	})

	t.Run("approval rules from an empty body", func(t *testing.T) {
		rules := model.ApprovalRules{Rules: []model.GatewayApprovalRule{{Tool: "creds__*", Decision: "ask"}}}
		if r := e.do("PUT", "/api/v1/approvals/rules", rules); r.status != http.StatusOK {
			t.Fatalf("put rules: %d %s", r.status, r.body)
		}
		for _, body := range []string{"", " \n"} {
			r := rawDo(t, "PUT", e.url+"/api/v1/approvals/rules", body,
				map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json"})
			wantInvalid(t, "PUT rules "+strconv.Quote(body), r, "body")
		}
		var got model.ApprovalRules
		e.do("GET", "/api/v1/approvals/rules", nil).decode(t, &got)
		if len(got.Rules) != 1 {
			t.Errorf("the rules after refused PUTs: %+v", got)
		}
	})

	t.Run("task list with an unknown state", func(t *testing.T) {
		wantInvalid(t, "GET /api/v1/tasks?state=bogus", e.do("GET", "/api/v1/tasks?state=bogus", nil), "state")
		for _, s := range []string{"", "working", "completed", "failed", "cancelled"} {
			if r := e.do("GET", "/api/v1/tasks?state="+s, nil); r.status != http.StatusOK {
				t.Errorf("state %q: %d %s", s, r.status, r.body)
			}
		}
	})
}

// TestRESTHeadOnStreams: HEAD of an event stream (the mux routes it to the
// GET handler) answers the head and ends, so the client's next request on
// the same connection is answered, not left unread behind a stream that
// has no body to send.
func TestRESTHeadOnStreams(t *testing.T) {
	t.Parallel()
	e := startREST(t)
	// One connection: the GET must go where the HEAD went.
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	t.Cleanup(cl.CloseIdleConnections)
	send := func(method, path string) (int, http.Header, error) {
		req, err := http.NewRequestWithContext(ctxT(t, time.Minute), method, e.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.admin)
		resp, err := cl.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header, nil
	}
	for _, path := range []string{"/api/v1/events", "/api/v1/events?kinds=call"} {
		status, hdr, err := send(http.MethodHead, path)
		if err != nil || status != http.StatusOK || hdr.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("HEAD %s: %d %v %v", path, status, hdr, err)
		}
		if status, _, err := send(http.MethodGet, "/api/v1/me"); err != nil || status != http.StatusOK {
			t.Fatalf("GET /api/v1/me after HEAD %s on the same connection: %d %v", path, status, err)
		}
	}
}

// TestRESTApprovalIDSpellings: an approval id that no held call can have
// (a NATS wildcard, dots, unicode) is NOT_FOUND like any unknown one, not
// an INTERNAL_ERROR from the bucket.
func TestRESTApprovalIDSpellings(t *testing.T) {
	t.Parallel()
	e := startREST(t)
	for _, id := range []string{"a.*", "*", "%3E", "a.b", "%C3%A9", strings.Repeat("0", 32), strings.Repeat("A", 32)} {
		for _, verb := range []string{"approve", "deny"} {
			wantCode(t, verb+" "+id, e.do("POST", "/api/v1/approvals/"+id+"/"+verb, nil), http.StatusNotFound, apierr.NotFound)
		}
	}
}
