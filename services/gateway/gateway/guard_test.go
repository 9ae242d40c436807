package gateway_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// raw sends method path with the given body and headers (no defaults).
func (h *gw) raw(method, path, body string, hdr map[string]string) reply {
	h.t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	var req *http.Request
	var err error
	if rd != nil {
		req, err = http.NewRequest(method, h.url+path, rd)
	} else {
		req, err = http.NewRequest(method, h.url+path, nil)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return h.send(req)
}

// State-changing requests a cross-site page could send are refused before
// auth, with and without --no-auth: a body not declared JSON (415) and a
// foreign Origin or Sec-Fetch-Site (403); allowed and same origins pass.
func TestCrossSiteWritesRefused(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	for _, noAuth := range []bool{false, true} {
		h := startGateway(t, e, gateway.Options{NoAuth: noAuth, CORSOrigins: []string{"https://console.example"}})
		auth := map[string]string{}
		if !noAuth {
			auth["Authorization"] = "Bearer " + h.admin
		}
		with := func(extra map[string]string) map[string]string {
			m := map[string]string{}
			for k, v := range auth {
				m[k] = v
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		body := `{"name":"evil","transport":"stdio","command":"/bin/sh"}`
		for _, rt := range []struct{ method, path string }{
			{"POST", "/api/v1/servers"}, {"PUT", "/api/v1/servers/alpha"}, {"PUT", "/api/v1/servers/alpha/credentials"},
			{"POST", "/mcp/invoke"}, {"POST", "/mcp"},
		} {
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
				r := h.raw(rt.method, rt.path, body, with(map[string]string{"Content-Type": ct}))
				if r.status != http.StatusUnsupportedMediaType || r.contract(t).Code != apierr.Validation {
					t.Fatalf("noauth=%v %s %s with Content-Type %q: %d %s, want 415 VALIDATION_ERROR", noAuth, rt.method, rt.path, ct, r.status, r.body)
				}
			}
			for _, hdr := range []map[string]string{
				{"Origin": "https://evil.example"},
				{"Origin": "null"},
				{"Sec-Fetch-Site": "cross-site"},
				{"Origin": "http://localhost:1", "Sec-Fetch-Site": "same-site"},
			} {
				hdr["Content-Type"] = "application/json"
				r := h.raw(rt.method, rt.path, body, with(hdr))
				if r.status != http.StatusForbidden || r.contract(t).Code != apierr.Unauthorized {
					t.Fatalf("noauth=%v %s %s from %v: %d %s, want 403", noAuth, rt.method, rt.path, hdr, r.status, r.body)
				}
			}
		}
		// DELETE and a body-less POST are checked for their origin too.
		for _, rt := range []struct{ method, path string }{{"DELETE", "/api/v1/servers/alpha"}, {"POST", "/api/v1/servers/alpha/disable"}} {
			r := h.raw(rt.method, rt.path, "", with(map[string]string{"Origin": "https://evil.example"}))
			if r.status != http.StatusForbidden {
				t.Fatalf("noauth=%v %s %s from a foreign origin: %d %s", noAuth, rt.method, rt.path, r.status, r.body)
			}
			r = h.raw(rt.method, rt.path, "", with(map[string]string{"Content-Type": "text/plain"}))
			if r.status != http.StatusUnsupportedMediaType {
				t.Fatalf("noauth=%v %s %s text/plain without a body: %d %s", noAuth, rt.method, rt.path, r.status, r.body)
			}
		}
		// What passes the guard: the allowed origin, the gateway's own
		// origin, no origin (a CLI), JSON with a charset.
		for _, hdr := range []map[string]string{
			{"Origin": "https://console.example", "Content-Type": "application/json"},
			{"Origin": h.url, "Content-Type": "application/json; charset=utf-8"},
			{"Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
			{"Content-Type": "application/json"},
		} {
			r := h.raw("POST", "/mcp/invoke", `{"tool_name":"nope__x"}`, with(hdr))
			if r.status != http.StatusNotFound {
				t.Fatalf("noauth=%v allowed invoke with %v: %d %s, want 404 (past the guard)", noAuth, hdr, r.status, r.body)
			}
		}
		// Reads are not state-changing: a foreign origin may GET (CORS keeps the answer from its page).
		r := h.raw("GET", "/mcp/tools", "", with(map[string]string{"Origin": "https://evil.example"}))
		if r.status != http.StatusOK {
			t.Fatalf("noauth=%v GET from a foreign origin: %d %s", noAuth, r.status, r.body)
		}
	}
}

// The MCP endpoint's standalone event stream (GET /mcp) checks the Origin
// as writes do: the spec has servers validate the Origin of every
// connection to it and refuse an invalid one with 403, and a stream of
// the session's notifications is no mere read. The allowed, the gateway's
// own and no Origin pass.
func TestMCPStreamOriginChecked(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	for _, noAuth := range []bool{false, true} {
		h := startGateway(t, e, gateway.Options{NoAuth: noAuth, CORSOrigins: []string{"https://console.example"}})
		hdr := func(extra map[string]string) map[string]string {
			m := map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Accept": "application/json, text/event-stream"}
			if !noAuth {
				m["Authorization"] = "Bearer " + h.admin
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		// A session per stream: go-sdk serves one GET stream a session at
		// a time, and one just closed may not be gone yet.
		session := func() string {
			t.Helper()
			init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
			r := h.raw("POST", "/mcp", init, hdr(map[string]string{"Content-Type": "application/json"}))
			sid := r.header.Get("Mcp-Session-Id")
			if r.status != http.StatusOK || sid == "" {
				t.Fatalf("noauth=%v initialize: %d %s", noAuth, r.status, r.body)
			}
			r = h.raw("POST", "/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				hdr(map[string]string{"Content-Type": "application/json", "Mcp-Session-Id": sid}))
			if r.status != http.StatusAccepted {
				t.Fatalf("noauth=%v initialized: %d %s", noAuth, r.status, r.body)
			}
			return sid
		}
		stream := func(extra map[string]string) int {
			t.Helper()
			req, err := http.NewRequest("GET", h.url+"/mcp", nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range hdr(extra) {
				req.Header.Set(k, v)
			}
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", session())
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close() // the status is the answer; the stream is not read
			return resp.StatusCode
		}
		for _, o := range []map[string]string{
			{"Origin": "https://evil.example"},
			{"Origin": "null"},
			{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
		} {
			if st := stream(o); st != http.StatusForbidden {
				t.Errorf("noauth=%v GET /mcp from %v: %d, want 403", noAuth, o, st)
			}
		}
		for _, o := range []map[string]string{
			{"Origin": "https://console.example"},
			{"Origin": h.url},
			{"Sec-Fetch-Site": "same-origin"},
			{},
		} {
			if st := stream(o); st != http.StatusOK {
				t.Errorf("noauth=%v GET /mcp from %v: %d, want the stream", noAuth, o, st)
			}
		}
	}
}

// A request that reached the loopback listener with a foreign Host (DNS
// rebinding) is refused on every route; localhost names pass.
func TestForeignHostRefused(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{NoAuth: true})
	_, port, _ := strings.Cut(strings.TrimPrefix(h.url, "http://"), ":")
	for _, path := range []string{"/healthz", "/mcp/tools", "/api/v1/status", "/api/v1/openapi.json", "/nope"} {
		for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.1.nip.io:" + port, "10.0.0.1"} {
			r := h.raw("GET", path, "", map[string]string{"Host": host})
			if r.status != http.StatusForbidden || !strings.Contains(r.contract(t).Message, "DNS rebinding") {
				t.Fatalf("GET %s with Host %s: %d %s, want 403", path, host, r.status, r.body)
			}
		}
		for _, host := range []string{"localhost", "localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "127.0.0.2"} {
			if r := h.raw("GET", path, "", map[string]string{"Host": host}); r.status == http.StatusForbidden {
				t.Fatalf("GET %s with Host %s: 403 %s", path, host, r.body)
			}
		}
	}
	r := h.raw("POST", "/mcp/invoke", `{}`, map[string]string{"Host": "evil.example", "Content-Type": "application/json"})
	if r.status != http.StatusForbidden {
		t.Fatalf("POST /mcp/invoke with a foreign Host: %d %s", r.status, r.body)
	}
}

// 401 for no or a bad key, 403 for a key without the scope, and an address
// that failed too often gets 429 with Retry-After for anything but a valid key.
func TestAuthFailuresThrottled(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{AuthFailures: 5})
	caller := h.key(model.KeyCreateRequest{Scopes: []string{"call"}})
	// A call key on the admin API: authenticated, not allowed; not a failure.
	for range 8 {
		r := h.do("GET", "/api/v1/status", caller.Key, nil)
		if r.status != http.StatusForbidden || r.contract(t).Code != apierr.Unauthorized ||
			!strings.Contains(r.header.Get("WWW-Authenticate"), "insufficient_scope") {
			t.Fatalf("call key on the admin API: %d %s %v", r.status, r.body, r.header)
		}
	}
	for i := range 5 {
		key := "mcpbus_nope"
		if i%2 == 0 {
			key = ""
		}
		if r := h.do("GET", "/mcp/tools", key, nil); r.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s, want 401", i+1, r.status, r.body)
		}
	}
	for _, key := range []string{"mcpbus_nope", ""} {
		r := h.do("GET", "/mcp/tools", key, nil)
		secs, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != http.StatusTooManyRequests || r.contract(t).Code != apierr.RateLimited || secs < 1 || secs > 60 {
			t.Fatalf("after 5 failures, key %.12q: %d %s Retry-After %q", key, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	// A valid key is not held back by the address's failures (its own
	// failures have a bucket of their own: auth.TestFailureThrottleBuckets).
	if r := h.do("GET", "/mcp/tools", h.admin, nil); r.status != http.StatusOK {
		t.Fatalf("the admin key from the throttled address: %d %s", r.status, r.body)
	}
	// Public routes stay open.
	if r := h.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("healthz while throttled: %d", r.status)
	}
}

// TestTrustedProxyThrottle: behind a trusted proxy one client's failures do
// not lock out another; from an untrusted peer X-Forwarded-For is ignored.
func TestTrustedProxyThrottle(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	fromClient := func(h *gw, client, key string) reply {
		req, err := http.NewRequest("GET", h.url+"/mcp/tools", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", client)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return h.send(req)
	}
	const bad = "mcpbus_nope"
	for _, c := range []struct {
		name    string
		trusted []string
		// otherBad is what a second client's bad key gets after the first
		// client used up its failures.
		otherBad int
	}{
		{"trusted", []string{"127.0.0.0/8", "::1/128"}, http.StatusUnauthorized},
		{"untrusted", []string{"10.0.0.0/8"}, http.StatusTooManyRequests},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := startGateway(t, e, gateway.Options{AuthFailures: 3, TrustedProxies: c.trusted})
			for i := range 3 {
				if r := fromClient(h, "203.0.113.1", bad); r.status != http.StatusUnauthorized {
					t.Fatalf("client 1, failure %d: %d %s", i+1, r.status, r.body)
				}
			}
			if r := fromClient(h, "203.0.113.1", bad); r.status != http.StatusTooManyRequests {
				t.Fatalf("client 1 after its failures: %d %s, want 429", r.status, r.body)
			}
			if r := fromClient(h, "203.0.113.2", bad); r.status != c.otherBad {
				t.Fatalf("client 2's first bad key: %d %s, want %d", r.status, r.body, c.otherBad)
			}
			// A valid key passes either way.
			if r := fromClient(h, "203.0.113.2", h.admin); r.status != http.StatusOK {
				t.Fatalf("client 2's valid key: %d %s", r.status, r.body)
			}
			// The access log names the client the proxy forwarded, and only
			// then (a line is written once its response is sent: wait for it).
			named := false
			for end := time.Now().Add(2 * time.Second); !named && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				named = strings.Contains(h.logs.String(), `"client":"203.0.113.2"`)
			}
			if named != (c.name == "trusted") {
				t.Fatalf("access log names the forwarded client: %v, want %v", named, c.name == "trusted")
			}
		})
	}
}

// A key revoked while its event stream is open: the stream ends at once.
func TestEventStreamEndsOnRevoke(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{})
	k := h.key(model.KeyCreateRequest{Scopes: []string{"admin"}})
	other := h.key(model.KeyCreateRequest{Scopes: []string{"admin"}, Name: "other"})
	open := func(key string) (*bufio.Reader, func()) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/api/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("events: %v %v", err, resp)
		}
		br := bufio.NewReader(resp.Body)
		for { // the connected comment
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(line, ": connected") {
				break
			}
		}
		return br, func() { cancel(); resp.Body.Close() }
	}
	br, closeIt := open(k.Key)
	defer closeIt()
	obr, closeOther := open(other.Key)
	defer closeOther()
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := br.ReadString('\n'); err != nil {
				ended <- err
				return
			}
		}
	}()
	otherEnded := make(chan struct{})
	go func() {
		for {
			if _, err := obr.ReadString('\n'); err != nil {
				close(otherEnded)
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.g.Keys().Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Fatal("the event stream of a revoked key is still open 3s after the revocation")
	}
	select {
	case <-otherEnded:
		t.Fatal("the stream of another key ended too")
	case <-time.After(300 * time.Millisecond):
	}
}

// bearerRT adds an API key to every request.
type bearerRT struct{ key string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// A server restarting after a crash keeps its tools listed, and calls to
// them are told to retry after its restart: 503 with Retry-After on
// /mcp/invoke, a "restarting, retry after N s" error on /mcp (fast path and
// go-sdk alike), instead of TOOL_NOT_FOUND. Once it runs, calls work again.
func TestCrashedServerKeepsTools(t *testing.T) {
	opts := quietRunner()
	opts.RestartBackoff = 6 * time.Second
	e := runnertest.Start(t, opts)
	runServer(t, e, "crashy", nil)
	fast := startGatewayOpts(t, e, false)
	slow := startGatewayOpts(t, e, true)
	for _, h := range []*gw{fast, slow} {
		h.waitTool("", "crashy__echo")
	}
	sessions := map[*gw]*mcp.ClientSession{}
	for _, h := range []*gw{fast, slow} {
		c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		s, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{"none"}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		sessions[h] = s
	}
	// Crash it.
	r := fast.do("POST", "/mcp/invoke", "", map[string]any{"tool_name": "crashy__crash", "params": map[string]any{}})
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("crash call: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.Status("crashy")
		if st.State == model.StateError && !st.RetryAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error with retry_at after the crash: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, h := range []*gw{fast, slow} {
		var r reply
		// Polled slowly enough to stay within the key's burst (40) on a
		// loaded machine, where the gateway may see the status late: until
		// then the call reaches the runner, whose own 503 ("server crashy
		// is restarting after a crash (…); retry after N s") gets its
		// Retry-After only once the gateway knows of the restart.
		deadline := time.Now().Add(4 * time.Second)
		for {
			r = h.do("POST", "/mcp/invoke", "", map[string]any{"tool_name": "crashy__echo", "params": map[string]any{"message": "hi"}})
			if (r.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") != "") || time.Now().After(deadline) {
				break
			}
			time.Sleep(150 * time.Millisecond)
		}
		var out rest.InvokeReply
		r.decode(t, &out)
		secs, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != http.StatusServiceUnavailable || out.ErrorType != rest.ErrUnavailable || secs < 1 || secs > 6 ||
			!strings.Contains(out.Error, "restarting") {
			t.Fatalf("invoke while restarting: %d %s Retry-After %q (status in KV: %+v)", r.status, r.body, r.header.Get("Retry-After"), e.Status("crashy"))
		}
		h.waitTool("", "crashy__echo") // still listed
		// The REST API and the MCP views follow the status and catalog
		// buckets each on their own watches: the view may see the restart's
		// status a moment after the REST API did. (Every status write of the
		// backoff carries retry_at: runner TestRetryAtStaysUntilRestart.)
		listed := func() bool {
			tools, err := sessions[h].ListTools(t.Context(), nil)
			if err != nil {
				t.Fatalf("%v (status in KV: %+v)", err, e.Status("crashy"))
			}
			for _, tl := range tools.Tools {
				if tl.Name == "crashy__echo" {
					return true
				}
			}
			return false
		}
		for wait := time.Now().Add(2 * time.Second); !listed(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(wait) {
				t.Fatalf("crashy__echo left the MCP tool list while the server restarts (status in KV: %+v)", e.Status("crashy"))
			}
		}
		// The same watches: a view that listed the tool before it saw the
		// catalog go may lose it until it sees the restart's status, a
		// moment. Within the 6 s backoff the call must be told to retry;
		// should the view only catch up once the server runs again, the
		// call succeeds, which is logged.
		for wait := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			res, err := sessions[h].CallTool(t.Context(), &mcp.CallToolParams{Name: "crashy__echo", Arguments: map[string]any{"message": "hi"}})
			// The gateway's answer is a tool error saying when to retry (as
			// an outage's is); a call let through before the gateway saw the
			// crash gets the runner's, a JSON-RPC error saying the same.
			if err == nil && res.IsError && len(res.Content) == 1 {
				text := res.Content[0].(*mcp.TextContent).Text
				if !strings.Contains(text, "restarting after a crash; retry after") {
					t.Fatalf("MCP call while restarting: tool error %q", text)
				}
				break
			}
			if err != nil && strings.Contains(err.Error(), "restarting after a crash") && strings.Contains(err.Error(), "retry after") {
				break
			}
			if err == nil && !res.IsError && e.Status("crashy").State == model.StateRunning {
				t.Logf("the MCP view saw the restart only once the server ran again")
				break
			}
			if time.Now().After(wait) || err == nil || !strings.Contains(err.Error(), "unknown tool") {
				t.Fatalf("MCP call while restarting: %v %+v (status in KV: %+v)", err, res, e.Status("crashy"))
			}
		}

	}
	// After the restart, calls work again.
	e.WaitState(t, "crashy", model.StateRunning, 20*time.Second)
	deadline = time.Now().Add(10 * time.Second)
	for _, h := range []*gw{fast, slow} {
		for {
			r := h.do("POST", "/mcp/invoke", "", map[string]any{"tool_name": "crashy__echo", "params": map[string]any{"message": "hi"}})
			if r.status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("invoke after the restart: %d %s", r.status, r.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// startGatewayOpts starts a --no-auth gateway, without the MCP fast path when noFast.
func startGatewayOpts(t *testing.T, e *runnertest.Env, noFast bool) *gw {
	o := gateway.Options{NoAuth: true}
	o.MCP.NoFastPath = noFast
	return startGateway(t, e, o)
}
