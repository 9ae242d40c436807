package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// leakEnv is the whole system with the test server "tm" running and one
// HTTP client whose connections are reused, so the only connections that
// come and go are the ones an operation makes on purpose.
type leakEnv struct {
	*mcpEnv
	client *http.Client
}

func startLeak(t *testing.T, gw gateway.Options) *leakEnv {
	t.Helper()
	// No per-key rate limit: the tests send hundreds of requests at once.
	gw.RateRPS, gw.RateBurst = 1e6, 1e6
	e := startMCP(t, gw)
	e.enable(t, testServerConfig("tm"))
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &leakEnv{mcpEnv: e, client: &http.Client{Transport: tr}}
}

func (e *leakEnv) post(t *testing.T, ctx context.Context, method, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + e.admin}
	if body != "" {
		h["Content-Type"] = "application/json"
	}
	for k, v := range hdr {
		h[k] = v
	}
	st, rh, data, err := rawPost(ctx, e.client, method, e.url+path, body, h)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return st, rh, data
}

// legacy is a raw 2025-11-25 session: initialize, initialized, then calls.
func (e *leakEnv) legacyOpen(t *testing.T) string {
	t.Helper()
	hdr := map[string]string{"Accept": "application/json, text/event-stream"}
	st, rh, data := e.post(t, t.Context(), http.MethodPost, "/mcp",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"leak","version":"1"}}}`, hdr)
	id := rh.Get("Mcp-Session-Id")
	if st != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %s (session %q)", st, data, id)
	}
	hdr["Mcp-Session-Id"], hdr["Mcp-Protocol-Version"] = id, "2025-11-25"
	if st, _, data := e.post(t, t.Context(), http.MethodPost, "/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); st != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", st, data)
	}
	return id
}

func (e *leakEnv) legacyCall(t *testing.T, session, tool, args string) string {
	t.Helper()
	hdr := map[string]string{"Accept": "application/json, text/event-stream", "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
	st, _, data := e.post(t, t.Context(), http.MethodPost, "/mcp",
		fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args), hdr)
	if st != http.StatusOK || !strings.Contains(string(data), `"result"`) {
		t.Fatalf("tools/call %s: %d %s", tool, st, data)
	}
	return string(data)
}

func (e *leakEnv) legacyClose(t *testing.T, session string) {
	t.Helper()
	hdr := map[string]string{"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
	if st, _, data := e.post(t, t.Context(), http.MethodDelete, "/mcp", "", hdr); st != http.StatusNoContent && st != http.StatusOK {
		t.Fatalf("DELETE session: %d %s", st, data)
	}
}

func (e *leakEnv) modern(t *testing.T, ctx context.Context, tool, args string) (int, []byte, error) {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{%s,"name":%q,"arguments":%s}}`, meta, tool, args)
	st, _, data, err := rawPost(ctx, e.client, http.MethodPost, e.url+"/mcp", body, map[string]string{
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer " + e.admin, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
	})
	return st, data, err
}

const leakN = 200

func TestLeakLegacySessionsClosed(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	holdsSteady(t, e.st.NATS.Server, 10, leakN, 20*time.Second, defaultLimits(leakN), func(i int) {
		s := e.legacyOpen(t)
		e.legacyCall(t, s, "tm__echo", fmt.Sprintf(`{"message":"m%d"}`, i))
		e.legacyClose(t, s)
	})
}

func TestLeakLegacySessionsAbandoned(t *testing.T) {
	e := startLeak(t, gateway.Options{MCP: mcpserver.Options{SessionTimeout: 2 * time.Second}})
	holdsSteady(t, e.st.NATS.Server, 10, leakN, 30*time.Second, defaultLimits(leakN), func(i int) {
		s := e.legacyOpen(t)
		e.legacyCall(t, s, "tm__echo", fmt.Sprintf(`{"message":"m%d"}`, i))
	})
}

func TestLeakModernCalls(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	holdsSteady(t, e.st.NATS.Server, 10, leakN, 20*time.Second, defaultLimits(leakN), func(i int) {
		st, data, err := e.modern(t, t.Context(), "tm__echo", fmt.Sprintf(`{"message":"m%d"}`, i))
		if err != nil || st != http.StatusOK || !strings.Contains(string(data), `"result"`) {
			t.Fatalf("tools/call: %d %s %v", st, data, err)
		}
	})
}

func TestLeakInvokeCalls(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	holdsSteady(t, e.st.NATS.Server, 10, leakN, 20*time.Second, defaultLimits(leakN), func(i int) {
		st, _, data := e.post(t, t.Context(), http.MethodPost, "/mcp/invoke", fmt.Sprintf(`{"tool_name":"tm__echo","params":{"message":"m%d"}}`, i), nil)
		if st != http.StatusOK {
			t.Fatalf("invoke: %d %s", st, data)
		}
	})
}

// Calls the client gives up on mid-call, and calls the gateway times out.
func TestLeakCallsCancelledAndTimedOut(t *testing.T) {
	e := startLeak(t, gateway.Options{CallTimeout: 300 * time.Millisecond})
	holdsSteady(t, e.st.NATS.Server, 8, 60, 30*time.Second, defaultLimits(60), func(i int) {
		switch i % 4 {
		case 0: // /mcp/invoke past the gateway's CallTimeout
			st, _, data := e.post(t, t.Context(), http.MethodPost, "/mcp/invoke", `{"tool_name":"tm__sleep","params":{"ms":3000}}`, nil)
			if st == http.StatusOK {
				t.Fatalf("invoke past the timeout: %d %s", st, data)
			}
		case 1: // /mcp/invoke dropped by the client
			ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
			defer cancel()
			_, _, _, _ = rawPost(ctx, e.client, http.MethodPost, e.url+"/mcp/invoke", `{"tool_name":"tm__sleep","params":{"ms":3000}}`,
				map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json"})
		case 2: // 2026-07-28 dropped by the client
			ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
			defer cancel()
			_, _, _ = e.modern(t, ctx, "tm__sleep", `{"ms":3000}`)
		case 3: // a 2025-11-25 session's call dropped, then the session closed
			s := e.legacyOpen(t)
			ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
			defer cancel()
			_, _, _, _ = rawPost(ctx, e.client, http.MethodPost, e.url+"/mcp",
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tm__sleep","arguments":{"ms":3000}}}`,
				map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
					"Mcp-Session-Id": s, "Mcp-Protocol-Version": "2025-11-25"})
			e.legacyClose(t, s)
		}
	})
}

// openDrop opens an event stream, waits for ": connected" and drops it.
func (e *leakEnv) openDrop(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.admin)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), ": connected") {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("GET %s: %v after %q", path, err, got.String())
		}
	}
}

func TestLeakEventStreamsDropped(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	// A task whose event stream is opened again and again.
	st, _, data := e.post(t, t.Context(), http.MethodPost, "/api/v1/tasks", `{"name":"tm__sleep","arguments":{"ms":600000}}`, nil)
	var task model.Task
	if err := json.Unmarshal(data, &task); err != nil || st != http.StatusAccepted {
		t.Fatalf("POST task: %d %s", st, data)
	}
	conv := "0b9d5f0c-5b1e-4f0e-9a43-6a8e6c1d2f01"
	holdsSteady(t, e.st.NATS.Server, 6, leakN, 20*time.Second, defaultLimits(leakN), func(i int) {
		switch i % 3 {
		case 0:
			e.openDrop(t, "/api/v1/events")
		case 1:
			e.openDrop(t, "/api/v1/tasks/"+task.ID+"/events")
		case 2:
			e.openDrop(t, "/api/v1/chat/conversations/"+conv+"/events")
		}
	})
}

func TestLeakTasks(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	holdsSteady(t, e.st.NATS.Server, 10, leakN, 20*time.Second, defaultLimits(leakN), func(i int) {
		st, _, data := e.post(t, t.Context(), http.MethodPost, "/api/v1/tasks", fmt.Sprintf(`{"name":"tm__echo","arguments":{"message":"m%d"}}`, i), nil)
		var task model.Task
		if err := json.Unmarshal(data, &task); err != nil || st != http.StatusAccepted {
			t.Fatalf("POST task: %d %s", st, data)
		}
		st, _, data = e.post(t, t.Context(), http.MethodGet, "/api/v1/tasks/"+task.ID+"/result?wait=20s", "", nil)
		if st != http.StatusOK {
			t.Fatalf("task result: %d %s", st, data)
		}
	})
}

func TestLeakKeys(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	holdsSteady(t, e.st.NATS.Server, 10, leakN, 20*time.Second, defaultLimits(leakN), func(i int) {
		st, _, data := e.post(t, t.Context(), http.MethodPost, "/api/v1/keys", fmt.Sprintf(`{"name":"k%d","scopes":["call"]}`, i), nil)
		var k model.KeyCreateReply
		if err := json.Unmarshal(data, &k); err != nil || st != http.StatusCreated && st != http.StatusOK {
			t.Fatalf("POST key: %d %s", st, data)
		}
		// The key is used once, then revoked.
		if st, _, data, err := rawPost(t.Context(), e.client, http.MethodPost, e.url+"/mcp/invoke", `{"tool_name":"tm__echo","params":{"message":"k"}}`,
			map[string]string{"Authorization": "Bearer " + k.Key, "Content-Type": "application/json"}); err != nil || st != http.StatusOK {
			t.Fatalf("invoke with the new key: %d %s %v", st, data, err)
		}
		if st, _, data := e.post(t, t.Context(), http.MethodDelete, "/api/v1/keys/"+k.ID, "", nil); st != http.StatusOK {
			t.Fatalf("revoke: %d %s", st, data)
		}
	})
}

// Servers restarted, disabled and enabled, and crashed (the test server's
// crash tool exits its process; the next call starts it again).
func TestLeakServerLifecycle(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	echo := func() (int, []byte) {
		st, _, data := e.post(t, t.Context(), http.MethodPost, "/mcp/invoke", `{"tool_name":"tm__echo","params":{"message":"up"}}`, nil)
		return st, data
	}
	waitEcho := func(what string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, data := echo()
			if st == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s: echo %d %s", what, st, data)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	holdsSteady(t, e.st.NATS.Server, 3, 45, 30*time.Second, defaultLimits(45), func(i int) {
		switch i % 3 {
		case 0:
			if st, _, data := e.post(t, t.Context(), http.MethodPost, "/api/v1/servers/tm/restart", "", nil); st >= 300 {
				t.Fatalf("restart: %d %s", st, data)
			}
			waitEcho("restart")
		case 1:
			for _, op := range []string{"disable", "enable"} {
				if st, _, data := e.post(t, t.Context(), http.MethodPost, "/api/v1/servers/tm/"+op, "", nil); st >= 300 {
					t.Fatalf("%s: %d %s", op, st, data)
				}
			}
			waitEcho("disable and enable")
		case 2:
			_, _, _ = e.post(t, t.Context(), http.MethodPost, "/mcp/invoke", `{"tool_name":"tm__crash","params":{}}`, nil)
			waitEcho("crash")
		}
	})
}

// Chat turns with a tool call, over the REST API and /v1/chat/completions.
func TestLeakChatTurns(t *testing.T) {
	c := startChatWith(t, gateway.Options{RateRPS: 1e6, RateBurst: 1e6})
	c.putProfile(t, "assistant", nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	e := &leakEnv{mcpEnv: c.mcpEnv, client: &http.Client{Transport: tr}}
	// A turn's subscriptions and consumers go once it ends: none may stay.
	// The heap gets more room, as the local model server keeps every
	// request it got (~90 KiB a turn here).
	lim := leakLimits{goroutines: 10, fds: 8, subs: 0, consumers: 0, children: 1, heap: 32 << 20}
	holdsSteady(t, e.st.NATS.Server, 4, 150, 30*time.Second, lim, func(i int) {
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"in chat"}`)), llmtest.Text("said it"))
		body := `{"model":"assistant","messages":[{"role":"user","content":"echo it"}]}`
		st, _, data := e.post(t, t.Context(), http.MethodPost, "/v1/chat/completions", body, nil)
		if st != http.StatusOK || !strings.Contains(string(data), "said it") {
			t.Fatalf("chat completion: %d %s", st, data)
		}
	})
}

// Streams dropped by the client mid-work: a streaming chat completion
// dropped during its tool call, and a conversation's event stream dropped
// while its turn runs.
func TestLeakChatStreamsDropped(t *testing.T) {
	c := startChatWith(t, gateway.Options{RateRPS: 1e6, RateBurst: 1e6})
	c.putProfile(t, "assistant", nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	e := &leakEnv{mcpEnv: c.mcpEnv, client: &http.Client{Transport: tr}}
	holdsSteady(t, e.st.NATS.Server, 4, 30, 40*time.Second, defaultLimits(30), func(i int) {
		c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__sleep", `{"ms":400}`)), llmtest.Text("slept"))
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		defer cancel()
		if i%2 == 0 {
			body := `{"model":"assistant","stream":true,"messages":[{"role":"user","content":"sleep"}]}`
			_, _, _, _ = rawPost(ctx, e.client, http.MethodPost, e.url+"/v1/chat/completions", body,
				map[string]string{"Authorization": "Bearer " + e.admin, "Content-Type": "application/json"})
		} else {
			conv := fmt.Sprintf("0b9d5f0c-5b1e-4f0e-9a43-%012d", i)
			go func() {
				_, _, _, _ = rawPost(ctx, e.client, http.MethodGet, e.url+"/api/v1/chat/conversations/"+conv+"/events", "",
					map[string]string{"Authorization": "Bearer " + e.admin})
			}()
			st, _, data := e.post(t, t.Context(), http.MethodPost, "/api/v1/chat/conversations",
				fmt.Sprintf(`{"conversation":%q,"profile":"assistant","message":"sleep"}`, conv), nil)
			if st != http.StatusAccepted {
				t.Fatalf("POST conversation: %d %s", st, data)
			}
			<-ctx.Done()
		}
		time.Sleep(500 * time.Millisecond) // the turn ends
	})
}

// openDropListen opens a 2026-07-28 subscriptions/listen stream (tool list
// changes and a resource of tm), waits for its acknowledgement and drops it.
func (e *leakEnv) openDropListen(t *testing.T, i int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{%s,"notifications":{"toolsListChanged":true,"resourceSubscriptions":["mcpbus://tm/test:%%2F%%2Fgreeting"]}}}`, i+1, meta)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/mcp", strings.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer " + e.admin, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"} {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), "notifications/subscriptions/acknowledged") {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("listen: %d %v after %q", resp.StatusCode, err, got.String())
		}
	}
}

func TestLeakListenStreamsDropped(t *testing.T) {
	e := startLeak(t, gateway.Options{})
	holdsSteady(t, e.st.NATS.Server, 6, leakN, 20*time.Second, defaultLimits(leakN), func(i int) {
		e.openDropListen(t, i)
	})
}

// Sessions whose client opened the GET stream and went away (the TCP
// connection dropped, never a DELETE): SessionTimeout reclaims them.
func TestLeakLegacySessionsWithStreamAbandoned(t *testing.T) {
	e := startLeak(t, gateway.Options{MCP: mcpserver.Options{SessionTimeout: 2 * time.Second}})
	holdsSteady(t, e.st.NATS.Server, 6, leakN, 30*time.Second, defaultLimits(leakN), func(i int) {
		s := e.legacyOpen(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/mcp", nil)
		for k, v := range map[string]string{"Accept": "text/event-stream", "Authorization": "Bearer " + e.admin,
			"Mcp-Session-Id": s, "Mcp-Protocol-Version": "2025-11-25"} {
			req.Header.Set(k, v)
		}
		resp, err := e.client.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET stream: %v %v", resp, err)
		}
		e.legacyCall(t, s, "tm__echo", `{"message":"with a stream"}`)
		_ = resp.Body.Close()
	})
}
