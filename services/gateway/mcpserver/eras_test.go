package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// One endpoint serves every era of the protocol, chosen per request: go-sdk
// clients of 2026-07-28 (no session), 2025-11-25, 2025-06-18, 2025-03-26 and
// 2024-11-05 (sessions), side by side, each seeing tools, calls, schema
// mismatches as tool errors and list_changed.
func TestEveryEraOnOneEndpoint(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	eras := []string{"", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"} // "": go-sdk's newest
	clients := map[string]*client{}
	for _, v := range eras {
		c := connect(t, e.url, "", &mcp.ClientSessionOptions{ProtocolVersion: v})
		clients[v] = c
		got := c.InitializeResult().ProtocolVersion
		switch want := cmpOr(v, "2026-07-28"); {
		case got != want:
			t.Fatalf("client of %s negotiated %s", want, got)
		case v == "" && c.ID() != "":
			t.Fatalf("2026-07-28 client got session %q", c.ID())
		case v != "" && c.ID() == "":
			t.Fatalf("%s client got no session", v)
		}
		if _, ok := tools(t, c)["alpha__echo"]; !ok {
			t.Fatalf("%s: alpha__echo missing", got)
		}
		res, err := call(t, c, "alpha__echo", map[string]any{"message": "era " + got})
		if err != nil || textOf(t, res) != "era "+got {
			t.Fatalf("%s call: %v", got, err)
		}
		res, err = call(t, c, "alpha__echo", map[string]any{"message": 7})
		wantMismatch(t, res, err, "alpha__echo")
		_, err = call(t, c, "alpha__nope", map[string]any{})
		wantRPCError(t, err, jsonrpc.CodeInvalidParams)
	}
	// list_changed: on the session of each older client, through
	// subscriptions/listen for the 2026-07-28 one.
	e.addServer(t, "beta", nil)
	for _, v := range eras {
		waitListChanged(t, clients[v], "adding beta, era "+cmpOr(v, "2026-07-28"))
	}
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// modernHeaders are the headers a 2026-07-28 request must carry (SEP-2575).
func modernHeaders(method, name string) map[string]string {
	h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

// modernBody is a 2026-07-28 request: params with the _meta triple.
func modernBody(id int, method, params string) string {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	if params == "" {
		params = "{" + meta + "}"
	} else {
		params = strings.Replace(params, "{", "{"+meta+",", 1)
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
}

// rpcMsg is a decoded JSON-RPC answer.
type rpcMsg struct {
	ID     any                        `json:"id"`
	Result map[string]json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeMsg(t *testing.T, r rawResp) rpcMsg {
	t.Helper()
	var m rpcMsg
	if err := json.Unmarshal([]byte(r.message(t)), &m); err != nil {
		t.Fatalf("not a JSON-RPC message (%d %s): %s", r.status, r.ctype, r.body)
	}
	return m
}

// The 2026-07-28 protocol message by message, as raw HTTP: what SEP-2575
// requires of the server, on the endpoint that also serves sessions.
func TestModernProtocolMessages(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast path", true: "go-sdk only"}[noFast], func(t *testing.T) {
			e := start(t, mcpserver.Options{NoAuth: true, NoFastPath: noFast, Version: "9.9"}, nil)
			e.addServer(t, "alpha", nil)
			e.addServer(t, "old", nil, "-protocols", "2025-11-25")
			post := func(body string, hdr map[string]string) rawResp {
				hdr["Mcp-Protocol-Version"] = cmpOr(hdr["Mcp-Protocol-Version"], "2026-07-28")
				r := rawWith(t, e.url, "", "", body, hdr)
				if r.session != "" {
					t.Fatalf("a 2026-07-28 answer carries Mcp-Session-Id %q", r.session)
				}
				return r
			}
			serverInfo := func(m rpcMsg) string {
				var meta map[string]struct{ Name, Version string }
				_ = json.Unmarshal(m.Result["_meta"], &meta)
				return meta[mcp.MetaKeyServerInfo].Name + "/" + meta[mcp.MetaKeyServerInfo].Version
			}

			// server/discover: both eras offered, the gateway's identity and capabilities.
			r := post(modernBody(1, "server/discover", ""), modernHeaders("server/discover", ""))
			m := decodeMsg(t, r)
			var versions []string
			_ = json.Unmarshal(m.Result["supportedVersions"], &versions)
			if r.status != http.StatusOK || !slices.Contains(versions, "2026-07-28") || !slices.Contains(versions, "2025-11-25") ||
				m.Result["capabilities"] == nil || serverInfo(m) != "mcpbus/9.9" {
				t.Fatalf("server/discover: %d %s", r.status, r.body)
			}

			// tools/list: resultType complete, cache hints private (the list is the key's).
			r = post(modernBody(2, "tools/list", ""), modernHeaders("tools/list", ""))
			m = decodeMsg(t, r)
			if string(m.Result["resultType"]) != `"complete"` || string(m.Result["cacheScope"]) != `"private"` ||
				!strings.Contains(string(m.Result["tools"]), `"alpha__echo"`) {
				t.Fatalf("tools/list: %d %s", r.status, r.body)
			}

			// resources/read and prompts/get: resultType, which 2026-07-28
			// requires of every result (the TypeScript SDK v2 refuses a result
			// without it), and the read's cache hints.
			// Of an upstream of 2026-07-28 (alpha) and of one of 2025-11-25
			// (old), whose results have no resultType of their own.
			for i, s := range []string{"alpha", "old"} {
				uri := "mcpbus://" + s + "/test:%2F%2Fgreeting"
				r = post(modernBody(10+i, "resources/read", `{"uri":"`+uri+`"}`), modernHeaders("resources/read", uri))
				m = decodeMsg(t, r)
				if string(m.Result["resultType"]) != `"complete"` || string(m.Result["cacheScope"]) != `"private"` ||
					serverInfo(m) != "mcpbus/9.9" || !strings.Contains(string(m.Result["contents"]), "hello") {
					t.Fatalf("resources/read of %s: %d %s", s, r.status, r.body)
				}
				r = post(modernBody(20+i, "prompts/get", `{"name":"`+s+`__greet","arguments":{"who":"x"}}`), modernHeaders("prompts/get", s+"__greet"))
				m = decodeMsg(t, r)
				if string(m.Result["resultType"]) != `"complete"` || serverInfo(m) != "mcpbus/9.9" || m.Result["messages"] == nil {
					t.Fatalf("prompts/get of %s: %d %s", s, r.status, r.body)
				}
			}

			// tools/call: the upstream's identity replaced by the gateway's.
			call := modernBody(3, "tools/call", `{"name":"alpha__echo","arguments":{"message":"modern"}}`)
			r = post(call, modernHeaders("tools/call", "alpha__echo"))
			m = decodeMsg(t, r)
			if string(m.Result["resultType"]) != `"complete"` || serverInfo(m) != "mcpbus/9.9" ||
				!strings.Contains(string(m.Result["content"]), `"modern"`) || m.Error != nil {
				t.Fatalf("tools/call: %d %s", r.status, r.body)
			}
			if want := map[bool]string{false: "application/json", true: "text/event-stream"}[noFast]; r.ctype != want {
				t.Fatalf("tools/call answered as %s, want %s", r.ctype, want)
			}
			// A schema mismatch is a tool error (SEP-1303).
			r = post(modernBody(4, "tools/call", `{"name":"alpha__echo","arguments":{"message":4}}`), modernHeaders("tools/call", "alpha__echo"))
			m = decodeMsg(t, r)
			if string(m.Result["isError"]) != "true" || !strings.Contains(string(m.Result["content"]), "arguments do not match the input schema of alpha__echo") {
				t.Fatalf("schema mismatch: %d %s", r.status, r.body)
			}

			// What SEP-2575 refuses, with its codes.
			for _, tc := range []struct {
				what   string
				body   string
				hdr    map[string]string
				status int
				code   int64
			}{
				{"no Mcp-Method header", call, map[string]string{"Mcp-Name": "alpha__echo"}, http.StatusBadRequest, mcp.CodeHeaderMismatch},
				{"Mcp-Name differs from the body", call, modernHeaders("tools/call", "alpha__other"), http.StatusBadRequest, mcp.CodeHeaderMismatch},
				{"Mcp-Method differs from the body", call, modernHeaders("tools/list", "alpha__echo"), http.StatusBadRequest, mcp.CodeHeaderMismatch},
				{"_meta without the header", call, map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/call", "Mcp-Name": "alpha__echo"}, http.StatusBadRequest, mcp.CodeHeaderMismatch},
				{"the header without _meta", `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}`, modernHeaders("tools/list", ""), http.StatusBadRequest, jsonrpc.CodeInvalidParams},
				{"an unknown method", modernBody(6, "tools/frobnicate", ""), modernHeaders("tools/frobnicate", ""), http.StatusNotFound, jsonrpc.CodeMethodNotFound},
				{"initialize is gone", modernBody(7, "initialize", `{"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"x","version":"1"}}`), modernHeaders("initialize", ""), http.StatusNotFound, jsonrpc.CodeMethodNotFound},
				{"an unknown tool", modernBody(8, "tools/call", `{"name":"alpha__nope","arguments":{}}`), modernHeaders("tools/call", "alpha__nope"), http.StatusBadRequest, jsonrpc.CodeInvalidParams},
				{"arguments not an object", modernBody(9, "tools/call", `{"name":"alpha__echo","arguments":[1]}`), modernHeaders("tools/call", "alpha__echo"), http.StatusBadRequest, jsonrpc.CodeInvalidParams},
			} {
				r := post(tc.body, tc.hdr)
				if r.status != tc.status || r.rpcCode(t) != tc.code {
					t.Errorf("%s: %d %s, want %d and code %d", tc.what, r.status, r.body, tc.status, tc.code)
				}
			}
			// No standalone stream, no session to delete.
			for _, method := range []string{http.MethodGet, http.MethodDelete} {
				req, _ := http.NewRequest(method, e.url, nil)
				req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
				req.Header.Set("Accept", "text/event-stream")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusMethodNotAllowed {
					t.Errorf("%s with 2026-07-28: %d, want 405", method, resp.StatusCode)
				}
			}
		})
	}
}

// The initialize era message by message, as raw HTTP: proper errors before
// initialize and for unknown methods, and none of the fields 2026-07-28 added.
func TestSessionProtocolMessages(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)

	// Before initialize: a JSON-RPC error with a code, not go-sdk's 0.
	r := raw(t, e.url, "", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if r.status != http.StatusBadRequest || r.rpcCode(t) != jsonrpc.CodeInvalidRequest || r.session != "" {
		t.Fatalf("tools/list before initialize: %d %s", r.status, r.body)
	}
	// server/discover is for 2026-07-28 clients only.
	if r := raw(t, e.url, "", "", `{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{}}`); r.rpcCode(t) != jsonrpc.CodeMethodNotFound {
		t.Fatalf("server/discover of an older client: %d %s", r.status, r.body)
	}
	if r := raw(t, e.url, "", "", `{"jsonrpc":"2.0","id":3,"method":"ping"}`); r.status != http.StatusOK || r.rpcCode(t) != 0 {
		t.Fatalf("ping before initialize: %d %s", r.status, r.body)
	}

	init := `{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	r = rawWith(t, e.url, "", "", init, map[string]string{"Mcp-Protocol-Version": ""})
	m := decodeMsg(t, r)
	if r.session == "" || string(m.Result["protocolVersion"]) != `"2025-11-25"` {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	for k := range m.Result {
		if !slices.Contains([]string{"protocolVersion", "capabilities", "serverInfo", "instructions", "_meta"}, k) {
			t.Errorf("initialize result of 2025-11-25 has %q: %s", k, r.body)
		}
	}
	sid := r.session
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", r.status, r.body)
	}
	noNewFields := func(what string, r rawResp) rpcMsg {
		t.Helper()
		m := decodeMsg(t, r)
		if m.Error != nil || m.Result == nil {
			t.Fatalf("%s: %d %s", what, r.status, r.body)
		}
		for _, k := range []string{"ttlMs", "cacheScope", "resultType"} {
			if _, ok := m.Result[k]; ok {
				t.Errorf("%s of a 2025-11-25 session carries %q: %s", what, k, r.body)
			}
		}
		if strings.Contains(r.body, mcp.MetaKeyServerInfo) {
			t.Errorf("%s of a 2025-11-25 session carries a serverInfo _meta: %s", what, r.body)
		}
		return m
	}
	noNewFields("tools/list", raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`))
	noNewFields("resources/list", raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":6,"method":"resources/list"}`))
	noNewFields("resources/read", raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"mcpbus://alpha/test:%2F%2Fgreeting"}}`))
	noNewFields("prompts/list", raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":8,"method":"prompts/list"}`))
	for _, noFast := range []string{"", "progress"} { // the fast path, and go-sdk's (a progress token)
		meta := ""
		if noFast != "" {
			meta = `,"_meta":{"progressToken":"p"}`
		}
		r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"old"}`+meta+`}}`)
		m := noNewFields("tools/call "+noFast, r)
		if !strings.Contains(string(m.Result["content"]), `"old"`) {
			t.Fatalf("tools/call: %s", r.body)
		}
	}
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":10,"method":"tools/frobnicate"}`); r.rpcCode(t) != jsonrpc.CodeMethodNotFound {
		t.Fatalf("unknown method: %d %s", r.status, r.body)
	}
}

// The fast path answers a 2026-07-28 call as go-sdk's stateless handler
// would, call for call.
func TestModernFastPathAnswersAsGoSDK(t *testing.T) {
	fast := start(t, mcpserver.Options{NoAuth: true}, nil)
	slow := start(t, mcpserver.Options{NoAuth: true, NoFastPath: true}, nil)
	runs := filepath.Join(t.TempDir(), "runs")
	fast.addServer(t, "alpha", map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}})
	slow.addServer(t, "alpha", nil)
	modern := &mcp.ClientSessionOptions{}
	fc, sc := connect(t, fast.url, "", modern), connect(t, slow.url, "", modern)
	for _, tc := range []struct {
		name string
		args any
	}{
		{"alpha__echo", map[string]any{"message": "same answer"}},
		{"alpha__fail", map[string]any{"message": "tool error"}},
		{"alpha__meta", map[string]any{}},
		{"alpha__echo", map[string]any{"message": 42}},
		{"alpha__nope", map[string]any{}},
	} {
		f, s := callOutcome(t, fc, tc.name, tc.args), callOutcome(t, sc, tc.name, tc.args)
		if string(f.Result) != string(s.Result) || f.Code != s.Code || f.Msg != s.Msg {
			t.Errorf("%s %v:\nfast path %+v\ngo-sdk    %+v", tc.name, tc.args, f, s)
		}
	}
	// A client that hangs up cancels its call at the runner (the POST is
	// the whole request): the gateway publishes the cancellation.
	// It hangs up once the call runs at the server: one that hung up before
	// its POST arrived would have nothing to cancel.
	cancels := count(t, fast, "mcp.v1.cancel.alpha")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer cancel()
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if data, _ := os.ReadFile(runs); len(data) > 0 {
				return
			}
		}
	}()
	if _, err := fc.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__sleep", Arguments: map[string]any{"ms": 20000}}); err == nil {
		t.Fatal("a call its client hung up on succeeded")
	}
	for end := time.Now().Add(30 * time.Second); cancels.Seen() == 0 && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if cancels.Seen() == 0 {
		t.Fatal("the gateway did not cancel the call of a client that hung up")
	}
}

// A client whose initialize proposes 2026-07-28, or a version newer than any
// the gateway knows, settles on 2025-11-25 and gets that era's results: no
// resultType, ttlMs or cacheScope, whatever it proposed.
func TestSessionProposingANewerVersion(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	for _, proposed := range []string{"2026-07-28", "2099-01-01"} {
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + proposed + `","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
		r := rawWith(t, e.url, "", "", init, map[string]string{"Mcp-Protocol-Version": ""})
		if m := decodeMsg(t, r); r.session == "" || string(m.Result["protocolVersion"]) != `"2025-11-25"` {
			t.Fatalf("initialize proposing %s: %d %s", proposed, r.status, r.body)
		}
		sid := r.session
		if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != http.StatusAccepted {
			t.Fatalf("initialized: %d %s", r.status, r.body)
		}
		for i, body := range []string{
			`"method":"tools/list"`,
			`"method":"resources/list"`,
			`"method":"resources/templates/list"`,
			`"method":"prompts/list"`,
			`"method":"resources/read","params":{"uri":"mcpbus://alpha/test:%2F%2Fgreeting"}`,
			`"method":"prompts/get","params":{"name":"alpha__greet","arguments":{"who":"x"}}`,
			`"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"old"}}`,
			`"method":"tools/call","params":{"name":"alpha__echo","arguments":{"message":"old"},"_meta":{"progressToken":"p"}}`,
		} {
			r := raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,%s}`, i+2, body))
			m := decodeMsg(t, r)
			if m.Error != nil || m.Result == nil {
				t.Fatalf("%s (proposed %s): %d %s", body, proposed, r.status, r.body)
			}
			for _, k := range []string{"ttlMs", "cacheScope", "resultType"} {
				if _, ok := m.Result[k]; ok {
					t.Errorf("%s of a session that proposed %s carries %q: %s", body, proposed, k, r.body)
				}
			}
		}
	}
}

// On a session, a well-formed request the gateway does not serve is a
// JSON-RPC error in a 200 answer (HTTP 400 is a transport error to clients:
// the TypeScript SDK's StreamableHTTPError, not McpError): -32601 for a
// method it does not serve (logging/setLevel among them: no logging
// capability, no server's log messages relayed), -32602 for a list cursor it
// did not issue. A second initialize is HTTP 400 with -32600, not go-sdk's
// code 0, as a request before initialize is.
func TestSessionRefusals(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	c := connect(t, e.url, "", nil)
	if caps, _ := json.Marshal(c.InitializeResult().Capabilities); strings.Contains(string(caps), `"logging"`) {
		t.Fatalf("the gateway declares logging: %s", caps)
	}
	sid := c.ID()
	for i, m := range []string{"foo/bar", "roots/list", "sampling/createMessage", "elicitation/create", "logging/setLevel"} {
		r := raw(t, e.url, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{}}`, i+1, m))
		if r.status != http.StatusOK || r.rpcCode(t) != jsonrpc.CodeMethodNotFound || !strings.Contains(r.message(t), fmt.Sprintf(`"id":%d`, i+1)) {
			t.Errorf("%s on a session: %d %s", m, r.status, r.body)
		}
	}
	if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":6,"method":"logging/setLevel","params":{"level":"loud"}}`); r.status != http.StatusOK || r.rpcCode(t) != jsonrpc.CodeMethodNotFound {
		t.Errorf("logging/setLevel loud: %d %s", r.status, r.body)
	}
	for _, m := range []string{"tools/list", "resources/list", "resources/templates/list", "prompts/list"} {
		if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":7,"method":"`+m+`","params":{"cursor":"bogus"}}`); r.status != http.StatusOK || r.rpcCode(t) != jsonrpc.CodeInvalidParams {
			t.Errorf("%s with a cursor the gateway did not issue: %d %s", m, r.status, r.body)
		}
		if r := raw(t, e.url, "", sid, `{"jsonrpc":"2.0","id":8,"method":"`+m+`","params":{}}`); r.status != http.StatusOK || r.rpcCode(t) != 0 {
			t.Errorf("%s: %d %s", m, r.status, r.body)
		}
	}
	init := `{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	if r := raw(t, e.url, "", sid, init); r.status != http.StatusBadRequest || r.rpcCode(t) != jsonrpc.CodeInvalidRequest {
		t.Errorf("initialize again on the session: %d %s", r.status, r.body)
	}
	// Without a session an unknown method is a request before initialize;
	// with a session of another key, a session not found.
	if r := raw(t, e.url, "", "", `{"jsonrpc":"2.0","id":10,"method":"foo/bar"}`); r.status != http.StatusBadRequest || r.rpcCode(t) != jsonrpc.CodeInvalidRequest {
		t.Errorf("foo/bar without a session: %d %s", r.status, r.body)
	}
	if r := raw(t, e.url, "", "nosuch", `{"jsonrpc":"2.0","id":11,"method":"foo/bar"}`); r.status != http.StatusNotFound {
		t.Errorf("foo/bar on an unknown session: %d %s", r.status, r.body)
	}
	// The session still works.
	if _, err := c.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}

	// An older client of a --stateless gateway.
	sl := start(t, mcpserver.Options{NoAuth: true, Stateless: true}, nil)
	if r := raw(t, sl.url, "", "", `{"jsonrpc":"2.0","id":1,"method":"foo/bar"}`); r.status != http.StatusOK || r.rpcCode(t) != jsonrpc.CodeMethodNotFound {
		t.Errorf("foo/bar of an older client, --stateless: %d %s", r.status, r.body)
	}
}

// A 2026-07-28 request that carries the headers of the older transport
// (Mcp-Session-Id, Last-Event-ID) is served as if it had none: the spec has
// a server ignore them (its streams are not resumable), not refuse the
// request. So on the fast path and go-sdk's.
func TestModernIgnoresOlderTransportHeaders(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		e := start(t, mcpserver.Options{NoAuth: true, NoFastPath: noFast}, nil)
		e.addServer(t, "alpha", nil)
		for i, tc := range []struct{ method, name, params string }{
			{"tools/call", "alpha__echo", `{"name":"alpha__echo","arguments":{"message":"old headers"}}`},
			{"tools/list", "", ""},
		} {
			h := modernHeaders(tc.method, tc.name)
			h["Last-Event-ID"] = "0_0"
			h["Mcp-Session-Id"] = "left-over"
			r := rawWith(t, e.url, "", "", modernBody(i+1, tc.method, tc.params), h)
			if m := decodeMsg(t, r); r.status != http.StatusOK || m.Error != nil || m.Result == nil || r.session != "" {
				t.Errorf("nofast=%v %s with Last-Event-ID and Mcp-Session-Id: %d %s %q", noFast, tc.method, r.status, r.body, r.session)
			}
		}
	}
}

// A POST whose MCP-Protocol-Version the gateway does not serve gets HTTP
// 400 with the UnsupportedProtocolVersionError of 2026-07-28 (-32022, the
// versions served, the one asked for): what a client of that era reads to
// pick another version. So for versions older than any served, which go-sdk
// refused in plain text, as for newer ones.
func TestUnsupportedVersionIsAJSONRPCError(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	sid := rawSession(t, e.url)
	call := `{"name":"alpha__echo","arguments":{"message":"x"}}`
	list := func(id int, version string) string {
		return strings.Replace(modernBody(id, "tools/list", ""), `protocolVersion":"2026-07-28"`, `protocolVersion":"`+version+`"`, 1)
	}
	for _, tc := range []struct {
		what, version, sid, body string
	}{
		{"an older version, 2026-07-28 body", "2025-01-01", "", modernBody(1, "tools/list", "")},
		{"an older version, 2026-07-28 body, its _meta agreeing", "2025-01-01", "", list(2, "2025-01-01")},
		{"an older version on a session", "1.0", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":` + call + `}`},
		{"a newer version", "2099-01-01", "", list(4, "2099-01-01")},
	} {
		h := modernHeaders("tools/list", "")
		if tc.sid != "" {
			h = map[string]string{}
		}
		h["Mcp-Protocol-Version"] = tc.version
		r := rawWith(t, e.url, "", tc.sid, tc.body, h)
		var m struct {
			Error *struct {
				Code int64 `json:"code"`
				Data struct {
					Supported []string `json:"supported"`
					Requested string   `json:"requested"`
				} `json:"data"`
			} `json:"error"`
		}
		if r.status != http.StatusBadRequest || json.Unmarshal([]byte(r.message(t)), &m) != nil || m.Error == nil ||
			m.Error.Code != mcp.CodeUnsupportedProtocolVersion || m.Error.Data.Requested != tc.version ||
			!slices.Contains(m.Error.Data.Supported, "2026-07-28") || !slices.Contains(m.Error.Data.Supported, "2025-11-25") {
			t.Errorf("%s: %d %s", tc.what, r.status, r.body)
		}
	}
}
