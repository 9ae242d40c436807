package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
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
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

func TestAuthOnEveryRoute(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	// Every route fails three times here: no throttle of failed attempts.
	h := startGateway(t, e, gateway.Options{AuthFailures: 1000})
	caller := h.key(model.KeyCreateRequest{Scopes: []string{"call"}})

	// Revoked over the bus, as `mcpbus keys revoke` does: refused at once.
	revoked := h.key(model.KeyCreateRequest{Scopes: []string{"admin"}})
	if r := h.do("GET", "/api/v1/status", revoked.Key, nil); r.status != http.StatusOK {
		t.Fatalf("key before revocation: %d %s", r.status, r.body)
	}
	var out model.APIKey
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := bus.RequestJSON(ctx, e.NC, "mcp.v1.keys.revoke", model.KeyRevokeRequest{ID: revoked.ID}, &out, 0); err != nil {
		t.Fatal(err)
	}

	for _, route := range h.g.Routes() {
		path := strings.ReplaceAll(route.Pattern, "{id}", "alpha")
		public := path == "/healthz" || path == "/readyz"
		for name, key := range map[string]string{"missing": "", "garbage": "mcpbus_nope", "revoked": revoked.Key} {
			r := h.do(route.Method, path, key, nil)
			if public {
				if r.status == http.StatusUnauthorized {
					t.Fatalf("%s %s is public but answered 401", route.Method, path)
				}
				continue
			}
			if r.status != http.StatusUnauthorized || r.refusal(t, path).Code != apierr.Unauthorized {
				t.Fatalf("%s %s with a %s key: %d %s, want 401 UNAUTHORIZED", route.Method, path, name, r.status, r.body)
			}
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Fatalf("%s %s: no Bearer challenge", route.Method, path)
			}
		}
		// A call-scoped key may not use the admin API nor the chat.
		if scope := auth.ScopeForPath(path); scope == auth.ScopeAdmin || scope == auth.ScopeChat {
			r := h.do(route.Method, path, caller.Key, nil)
			if r.status != http.StatusForbidden || !strings.Contains(r.refusal(t, path).Message, scope+" scope") ||
				!strings.Contains(r.header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
				t.Fatalf("%s %s with a call key: %d %s %q", route.Method, path, r.status, r.body, r.header.Get("WWW-Authenticate"))
			}
		}
	}
	// The admin key may call tools too.
	if r := h.do("GET", "/mcp/tools", h.admin, nil); r.status != http.StatusOK {
		t.Fatalf("admin on /mcp/tools: %d %s", r.status, r.body)
	}
}

func TestRateLimit(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{RateRPS: 0.2, RateBurst: 2})
	a := h.key(model.KeyCreateRequest{Scopes: []string{"call"}}).Key
	b := h.key(model.KeyCreateRequest{Scopes: []string{"call"}}).Key
	own := h.key(model.KeyCreateRequest{Scopes: []string{"call"}, Rate: &model.KeyRate{RPS: 100, Burst: 10}}).Key
	for i := range 2 {
		if r := h.do("GET", "/mcp/tools", a, nil); r.status != http.StatusOK {
			t.Fatalf("request %d: %d", i+1, r.status)
		}
	}
	r := h.do("GET", "/mcp/tools", a, nil)
	if r.status != http.StatusTooManyRequests || r.contract(t).Code != apierr.RateLimited {
		t.Fatalf("over the limit: %d %s", r.status, r.body)
	}
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 5 {
		t.Fatalf("Retry-After %q, want 1..5 s at 0.2 rps", r.header.Get("Retry-After"))
	}
	if r := h.do("GET", "/mcp/tools", b, nil); r.status != http.StatusOK {
		t.Fatalf("another key is limited too: %d", r.status)
	}
	for i := range 10 {
		if r := h.do("GET", "/mcp/tools", own, nil); r.status != http.StatusOK {
			t.Fatalf("key with its own rate, request %d: %d", i+1, r.status)
		}
	}
	// Probes are never limited.
	for range 5 {
		if r := h.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
			t.Fatalf("healthz: %d", r.status)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{MaxBodyBytes: 1024})
	key := h.key(model.KeyCreateRequest{Scopes: []string{"admin"}}).Key
	big := `{"tool_name":"alpha__echo","params":{"message":"` + strings.Repeat("x", 2048) + `"}}`
	for _, path := range []string{"/mcp/invoke", "/mcp", "/api/v1/servers"} {
		r := h.do("POST", path, key, big)
		if r.status != http.StatusRequestEntityTooLarge || r.contract(t).Field != "body" {
			t.Fatalf("POST %s with 2 KiB: %d %s, want 413", path, r.status, r.body)
		}
	}
	// Without a Content-Length (chunked) the limit holds while reading.
	pr, pw := io.Pipe()
	go func() {
		for range 4 {
			_, _ = pw.Write([]byte(strings.Repeat("y", 512)))
		}
		_ = pw.Close()
	}()
	req, _ := http.NewRequest("POST", h.url+"/mcp/invoke", pr)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if r := h.send(req); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked 2 KiB: %d %s", r.status, r.body)
	}
	// Just under the limit passes the size check (and fails on content).
	r := h.do("POST", "/mcp/invoke", key, `{"tool_name":"x"}`)
	if r.status != http.StatusBadRequest {
		t.Fatalf("small body: %d %s", r.status, r.body)
	}
}

func TestCORS(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{CORSOrigins: []string{"https://console.example"}})
	preflight := func(h *gw, origin string) reply {
		req, _ := http.NewRequest("OPTIONS", h.url+"/mcp/invoke", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		return h.send(req)
	}
	r := preflight(h, "https://console.example")
	if r.status >= 300 || r.header.Get("Access-Control-Allow-Origin") != "https://console.example" ||
		!strings.Contains(strings.ToLower(r.header.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Fatalf("allowed preflight: %d %v", r.status, r.header)
	}
	r = preflight(h, "https://evil.example")
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("denied origin got Access-Control-Allow-Origin: %v", r.header)
	}
	// A real request from the allowed origin gets the header; auth still applies.
	req, _ := http.NewRequest("GET", h.url+"/mcp/tools", nil)
	req.Header.Set("Origin", "https://console.example")
	if r := h.send(req); r.status != http.StatusUnauthorized || r.header.Get("Access-Control-Allow-Origin") != "https://console.example" {
		t.Fatalf("cross-origin request without key: %d %v", r.status, r.header)
	}
	// Default: no origins, no CORS headers at all.
	plain := startGateway(t, e, gateway.Options{})
	if r := preflight(plain, "https://console.example"); r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("CORS headers without configured origins: %v", r.header)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	if r := h.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("healthz: %d", r.status)
	}
	// A runner answers but no config service runs here: not ready, and it says why.
	r := h.do("GET", "/readyz", "", nil)
	var body struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Checks  map[string]string `json:"checks"`
	}
	r.decode(t, &body)
	if r.status != http.StatusServiceUnavailable || body.Code != string(apierr.ServiceUnavailable) ||
		body.Checks["nats"] != "ok" || body.Checks["runner"] != "ok" || body.Checks["config"] == "ok" || !strings.Contains(body.Message, "config") {
		t.Fatalf("readyz without a config service: %d %s", r.status, r.body)
	}
	// With the runner gone too, both are named.
	e.StopRunner(t)
	r = h.do("GET", "/readyz", "", nil)
	r.decode(t, &body)
	if r.status != http.StatusServiceUnavailable || body.Checks["runner"] == "ok" {
		t.Fatalf("readyz without runner: %d %s", r.status, r.body)
	}
	// The admin API reports the missing config service in the contract.
	r = h.do("GET", "/api/v1/servers", h.admin, nil)
	if r.status != http.StatusServiceUnavailable || r.contract(t).Code != apierr.ServiceUnavailable {
		t.Fatalf("servers without a config service: %d %s", r.status, r.body)
	}
}

func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	r := h.do("GET", "/api/v1/openapi.json", h.admin, nil)
	if r.status != http.StatusOK {
		t.Fatalf("openapi.json: %d", r.status)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	r.decode(t, &doc)
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			documented[strings.ToUpper(method)+" "+path] = true
			var o struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(op, &o); err != nil || len(o.Responses) == 0 {
				t.Errorf("%s %s has no responses", method, path)
			}
		}
	}
	served := map[string]bool{}
	for _, route := range h.g.Routes() {
		served[route.Method+" "+route.Pattern] = true
		if !documented[route.Method+" "+route.Pattern] {
			t.Errorf("route %s %s is not in openapi.json", route.Method, route.Pattern)
		}
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("openapi.json documents %s, which the gateway does not serve", op)
		}
	}
	if len(served) < 20 {
		t.Fatalf("only %d routes registered", len(served))
	}
}

// sse reads Server-Sent Events frames.
type sse struct {
	resp *http.Response
	rd   *bufio.Reader
}

func openEvents(t *testing.T, h *gw, query string) *sse {
	t.Helper()
	req, _ := http.NewRequest("GET", h.url+"/api/v1/events"+query, nil)
	req.Header.Set("Authorization", "Bearer "+h.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sse{resp: resp, rd: bufio.NewReader(resp.Body)}
	// The first frame says the stream is set up: later events reach us.
	if f := s.next(t, 5*time.Second); !strings.Contains(f, ": connected") {
		t.Fatalf("first frame %q", f)
	}
	return s
}

// next returns the next frame (lines up to a blank line).
func (s *sse) next(t *testing.T, within time.Duration) string {
	t.Helper()
	type res struct {
		frame string
		err   error
	}
	ch := make(chan res, 1)
	go func() {
		var b strings.Builder
		for {
			line, err := s.rd.ReadString('\n')
			if err != nil {
				ch <- res{b.String(), err}
				return
			}
			if line == "\n" {
				ch <- res{b.String(), nil}
				return
			}
			b.WriteString(line)
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("event stream ended: %v (partial %q)", r.err, r.frame)
		}
		return r.frame
	case <-time.After(within):
		t.Fatalf("no event frame within %s", within)
	}
	return ""
}

func TestEventsStreamDeliversStatus(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{EventHeartbeat: 50 * time.Millisecond})
	consumers := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := e.JS.Stream(ctx, bus.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	before := consumers()
	s := openEvents(t, h, "?kinds=status")
	// Nothing happens yet: the heartbeat keeps the stream alive.
	if f := s.next(t, time.Second); !strings.HasPrefix(f, ": ping") {
		t.Fatalf("want a heartbeat, got %q", f)
	}
	e.Put(t, runnertest.Binary("gamma", testServer))
	deadline := time.Now().Add(15 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no running status event within 15s")
		}
		f := s.next(t, 5*time.Second)
		if strings.HasPrefix(f, ": ping") {
			continue
		}
		lines := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(f), "\n") {
			k, v, _ := strings.Cut(l, ": ")
			lines[k] = v
		}
		if lines["event"] != "status" {
			t.Fatalf("kinds=status delivered %q", f)
		}
		if _, err := strconv.ParseUint(lines["id"], 10, 64); err != nil {
			t.Fatalf("event id %q is not a stream sequence", lines["id"])
		}
		var ev rest.Event
		if err := json.Unmarshal([]byte(lines["data"]), &ev); err != nil {
			t.Fatalf("data %q: %v", lines["data"], err)
		}
		var st model.Status
		if err := json.Unmarshal(ev.Data, &st); err != nil || ev.Kind != "status" || ev.Name != "gamma" || st.Server != "gamma" {
			t.Fatalf("event %+v", ev)
		}
		if st.State == model.StateRunning {
			break
		}
	}
	// The client goes: the stream's consumer goes with it.
	_ = s.resp.Body.Close()
	deadline = time.Now().Add(5 * time.Second)
	for consumers() > before {
		if time.Now().After(deadline) {
			t.Fatalf("event consumer still there after the client left: %d > %d", consumers(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEventsRejectsUnknownKinds(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	r := h.do("GET", "/api/v1/events?kinds=status,secrets", h.admin, nil)
	if r.status != http.StatusBadRequest || r.contract(t).Field != "kinds" {
		t.Fatalf("unknown kind: %d %s", r.status, r.body)
	}
}

func TestAccessLogNeverHasTheKey(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	k := h.key(model.KeyCreateRequest{Scopes: []string{"call"}})
	h.do("GET", "/mcp/tools?token=not-logged", k.Key, nil)
	h.do("GET", "/mcp/tools", k.Key+"x", nil)
	logs := h.logs.String()
	if strings.Contains(logs, k.Key) || strings.Contains(logs, h.admin) || strings.Contains(logs, "not-logged") {
		t.Fatalf("a key or query string reached the log:\n%s", logs)
	}
	found := false
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "http request" {
			continue
		}
		if rec["key_id"] == k.ID && rec["path"] == "/mcp/tools" && rec["method"] == "GET" && rec["status"] == float64(200) && rec["duration_ms"] != nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("no access log line with method, path, status, duration and key id:\n%s", logs)
	}
}

func TestAdminKeyFileReusedAcrossRestarts(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	dir := t.TempDir()
	first := startGateway(t, e, gateway.Options{DataDir: dir})
	if !first.g.AdminKeyCreated() || first.g.AdminKeyPath() != dir+"/admin.key" {
		t.Fatalf("first start: created=%v path=%s", first.g.AdminKeyCreated(), first.g.AdminKeyPath())
	}
	st, err := os.Stat(first.g.AdminKeyPath())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key: %v %v", st.Mode(), err)
	}
	if r := first.do("GET", "/api/v1/openapi.json", first.admin, nil); r.status != http.StatusOK {
		t.Fatalf("admin key on the admin API: %d", r.status)
	}
	first.shutdown(t)
	second := startGateway(t, e, gateway.Options{DataDir: dir})
	if second.g.AdminKeyCreated() || second.admin != first.admin {
		t.Fatal("a restart must reuse the admin key")
	}
	if r := second.do("GET", "/api/v1/status", second.admin, nil); r.status != http.StatusOK {
		t.Fatalf("reused admin key: %d %s", r.status, r.body)
	}
}

func TestNoAuth(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	runServer(t, e, "alpha", nil)
	h := startGateway(t, e, gateway.Options{NoAuth: true})
	if h.g.AdminKeyPath() != "" {
		t.Fatalf("no admin key without auth, got %s", h.g.AdminKeyPath())
	}
	h.waitTool("", "alpha__echo")
	if r := h.do("GET", "/api/v1/status", "", nil); r.status != http.StatusOK {
		t.Fatalf("admin API without auth: %d", r.status)
	}
	if !strings.Contains(h.logs.String(), "AUTHENTICATION IS OFF") {
		t.Fatalf("no loud warning:\n%s", h.logs.String())
	}
}

// headerTransport adds the bearer key to every MCP request.
type headerTransport struct{ key string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.key != "" {
		r.Header.Set("Authorization", "Bearer "+h.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestMCPEndpointBehindAuth(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	runServer(t, e, "alpha", nil)
	h := startGateway(t, e, gateway.Options{})
	key := h.key(model.KeyCreateRequest{Scopes: []string{"call"}, Tools: model.ToolFilter{Allow: []string{"alpha__echo"}}}).Key
	h.waitTool(key, "alpha__echo")
	connect := func(key string) (*mcp.ClientSession, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp",
			HTTPClient: &http.Client{Transport: headerTransport{key}}}, nil)
	}
	if _, err := connect(""); err == nil {
		t.Fatal("MCP without a key connected")
	}
	cs, err := connect(key)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{"alpha__echo"}) {
		t.Fatalf("MCP tools for a filtered key: %v", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "via mcp"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "via mcp" {
		t.Fatalf("MCP call: %+v %v", res, err)
	}
}

func TestShutdownEndsOpenStreams(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{ShutdownTimeout: 4 * time.Second})
	s := openEvents(t, h, "")
	start := time.Now()
	h.shutdown(t)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown with an open event stream took %s", d)
	}
	// The stream is over.
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(s.rd); done <- err }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("event stream still open after shutdown")
	}
}

func TestUnknownRoutesUseTheContract(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	r := h.do("GET", "/api/v1/nothing", h.admin, nil)
	if r.status != http.StatusNotFound || r.contract(t).Code != apierr.NotFound {
		t.Fatalf("unknown path: %d %s", r.status, r.body)
	}
	r = h.do("DELETE", "/mcp/invoke", h.admin, nil)
	if r.status != http.StatusMethodNotAllowed || r.contract(t).Code != apierr.Validation || !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Fatalf("wrong method: %d %s %v", r.status, r.body, r.header)
	}
	// Unknown paths under /api still need a key first.
	if r := h.do("GET", "/api/v1/nothing", "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("unknown path without key: %d", r.status)
	}
}

// One key holds at most MaxEventStreams event streams at once (each is a
// JetStream consumer); closing one makes room.
func TestEventStreamsPerKeyBounded(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{MaxEventStreams: 2})
	first := openEvents(t, h, "")
	openEvents(t, h, "")
	if r := h.do("GET", "/api/v1/events", h.admin, nil); r.status != http.StatusTooManyRequests || r.contract(t).Code != apierr.RateLimited {
		t.Fatalf("a third stream: %d %s, want 429 RATE_LIMITED", r.status, r.body)
	}
	_ = first.resp.Body.Close()
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		req, _ := http.NewRequest("GET", h.url+"/api/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+h.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("status %d after one stream closed", resp.StatusCode)
	})
}
