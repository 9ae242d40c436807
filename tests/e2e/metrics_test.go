package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// promSample is one line of the Prometheus text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseProm reads the samples of a /metrics answer (our label values hold no
// escaped quotes or commas).
func parseProm(t *testing.T, text string) []promSample {
	t.Helper()
	var out []promSample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 {
			t.Fatalf("not a sample: %q", line)
		}
		v, err := strconv.ParseFloat(line[cut+1:], 64)
		if err != nil {
			t.Fatalf("sample value of %q: %v", line, err)
		}
		s := promSample{name: line[:cut], labels: map[string]string{}, value: v}
		if i := strings.IndexByte(s.name, '{'); i >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(s.name[i+1:], "}"), ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
			s.name = s.name[:i]
		}
		out = append(out, s)
	}
	return out
}

// sum adds the samples of name whose labels include want.
func sum(samples []promSample, name string, want map[string]string) (total float64, found bool) {
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		total, found = total+s.value, true
	}
	return total, found
}

// httpDo sends one request and returns the status and the body.
func httpDo(t *testing.T, method, url, key, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t, 30*time.Second), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestMetricsAndHealth runs `mcpbus up --metrics-addr` and checks its
// operations endpoint end to end: `mcpbus health` passes once the stack is
// ready, and /metrics holds the runner's lifecycle metrics (a running
// server, manual and crash restarts), the registry cache's hits and misses,
// the gateway's request durations by route pattern and its refusals.
func TestMetricsAndHealth(t *testing.T) {
	t.Parallel()
	off := registrytest.SampleOfficial(t)

	bin := mcpbusBin
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	servers := everythingServersFile(t, dir)
	opsURL := fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t))
	up := startUp(t, bin, dir, clitest.Env(), "--data-dir", data, "--config", servers,
		"--metrics-addr", strings.TrimPrefix(opsURL, "http://"), "--official-registry-url", off.URL)
	nats, gw := up.NATSURL(), up.HTTPURL()

	// Ready once every service is: `mcpbus health` is the probe.
	testkit.WaitFor(t, 60*time.Second, func() (bool, string) {
		r := cli(t, bin, nats, "health", opsURL+"/readyz")
		return r.Code == 0 && strings.TrimSpace(r.Stdout) == "ok", "mcpbus health: " + r.String()
	})
	if r := cli(t, bin, nats, "health", opsURL+"/healthz"); r.Code != 0 {
		t.Errorf("mcpbus health /healthz: %s", r)
	}
	st := waitCLIState(t, bin, nats, "everything", model.StateRunning, 30*time.Second)

	// The gateway answers: the MCP endpoint, the REST API and a refused key.
	keyData, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyData))
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"metrics-test","version":"1"}}}`
	if code, body := httpDo(t, "POST", gw+"/mcp", key, initialize, "Accept", "application/json, text/event-stream"); code != http.StatusOK {
		t.Fatalf("POST /mcp initialize: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", gw+"/mcp/invoke", key, `{"tool_name":"everything__echo","params":{"message":"hi"}}`); code != http.StatusOK || !strings.Contains(body, "Echo: hi") {
		t.Fatalf("POST /mcp/invoke: %d %s", code, body)
	}
	// An MCP client's tools/call: the gateway's MCP server operation, the bus
	// request and the runner's MCP client operation are each timed.
	mcpClient := mcp.NewClient(&mcp.Implementation{Name: "metrics-test", Version: "1"}, nil)
	sess, err := mcpClient.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: gw + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerRT(key)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "m"}}); err != nil || res.IsError {
		t.Fatalf("tools/call everything__echo: %v %+v", err, res)
	}
	_ = sess.Close()
	for range 2 {
		if code, body := httpDo(t, "GET", gw+"/api/v1/servers/everything/status", key, ""); code != http.StatusOK {
			t.Fatalf("GET /api/v1/servers/everything/status: %d %s", code, body)
		}
	}

	// The registry: the first search asks the registry, the second the cache.
	for i := range 2 {
		if r := cli(t, bin, nats, "search", "airtable", "--registry", "official"); r.Code != 0 {
			t.Fatalf("search %d: %s", i, r)
		}
	}

	// A manual restart, then a crash the runner restarts by itself.
	if r := cli(t, bin, nats, "restart", "everything"); r.Code != 0 {
		t.Fatalf("restart everything: %s", r)
	}
	st2 := waitCLIState(t, bin, nats, "everything", model.StateRunning, 30*time.Second)
	if st2.PID == st.PID || st2.PID <= 0 {
		t.Fatalf("after restart the pid is %d (was %d)", st2.PID, st.PID)
	}
	if err := syscall.Kill(st2.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		s, r := statusOf(t, bin, nats, "everything")
		return s.State == model.StateRunning && s.PID != st2.PID, "after the crash: " + r.String()
	})

	// Failed authentications from this address: 401s, then 429 (last: the
	// address is throttled for a while, key or not).
	throttled := false
	for i := 0; i < 30 && !throttled; i++ {
		code, _ := httpDo(t, "GET", gw+"/mcp/tools", "mcpbus_not-a-key", "")
		throttled = code == http.StatusTooManyRequests
	}
	if !throttled {
		t.Fatal("30 failed authentications were never throttled with 429")
	}

	code, text := httpDo(t, "GET", opsURL+"/metrics", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, text)
	}
	samples := parseProm(t, text)
	check := func(name string, labels map[string]string, ok func(float64) bool, want string) {
		t.Helper()
		v, found := sum(samples, name, labels)
		if !found || !ok(v) {
			t.Errorf("%s%v = %v (found %v), want %s", name, labels, v, found, want)
		}
	}
	atLeast := func(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
	exactly := func(n float64) func(float64) bool { return func(v float64) bool { return v == n } }

	check("target_info", map[string]string{"service_name": "mcpbus"}, exactly(1), "1")
	check("mcpbus_runner_servers_running", map[string]string{"mcpbus_server": "everything"}, exactly(1), "1 (running)")
	check("mcpbus_runner_servers_running", nil, exactly(1), "1 server running in all")
	check("mcpbus_runner_server_restarts_total", map[string]string{"mcpbus_server": "everything", "reason": "manual"}, exactly(1), "1")
	check("mcpbus_runner_server_restarts_total", map[string]string{"mcpbus_server": "everything", "reason": "crash"}, atLeast(1), ">= 1")
	check("mcpbus_registry_cache_requests_total", map[string]string{"registry": "official", "result": "miss"}, atLeast(1), ">= 1")
	check("mcpbus_registry_cache_requests_total", map[string]string{"registry": "official", "result": "hit"}, atLeast(1), ">= 1")
	check("http_server_request_duration_seconds_count",
		map[string]string{"http_route": "/mcp", "http_request_method": "POST", "http_response_status_code": "200"}, atLeast(1), ">= 1")
	check("http_server_request_duration_seconds_count",
		map[string]string{"http_route": "/mcp/invoke", "http_request_method": "POST", "http_response_status_code": "200"}, exactly(1), "1")
	check("http_server_request_duration_seconds_count",
		map[string]string{"http_route": "/api/v1/servers/{id}/status", "http_request_method": "GET", "http_response_status_code": "200"}, exactly(2), "2")
	check("http_server_request_duration_seconds_count",
		map[string]string{"http_route": "/mcp/tools", "http_response_status_code": "401"}, atLeast(1), ">= 1")
	check("http_server_request_duration_seconds_bucket",
		map[string]string{"http_route": "/mcp/invoke", "le": "60"}, exactly(1), "1 (the seconds buckets)")
	check("mcpbus_gateway_ratelimit_refusals_total", map[string]string{"reason": "auth_throttle"}, atLeast(1), ">= 1")
	// The call path: /mcp/invoke and the MCP client's call both reached the runner.
	check("mcp_client_operation_duration_seconds_count", map[string]string{"mcp_method_name": "tools/call",
		"gen_ai_tool_name": "echo", "gen_ai_operation_name": "execute_tool", "mcpbus_server": "everything",
		"network_transport": "pipe"}, atLeast(2), ">= 2")
	check("mcp_server_operation_duration_seconds_count", map[string]string{"mcp_method_name": "tools/call",
		"gen_ai_tool_name": "everything__echo", "network_transport": "tcp"}, exactly(1), "1")
	check("mcp_server_operation_duration_seconds_count", map[string]string{"mcp_method_name": "initialize"}, atLeast(1), ">= 1")
	check("messaging_client_operation_duration_seconds_count", map[string]string{"messaging_system": "nats",
		"messaging_operation_name": "send", "messaging_destination_template": "mcp.v1.call.{server}.{tool}"}, atLeast(2), ">= 2")
	// The control plane: the runner asked the server's owner to restart it.
	check("messaging_client_operation_duration_seconds_count", map[string]string{
		"messaging_destination_template": "mcp.v1.control.{server}"}, atLeast(1), ">= 1")
	for _, s := range samples {
		if strings.HasPrefix(s.name, "mcp_") && s.labels["error_type"] != "" {
			t.Errorf("a call failed: %+v", s)
		}
	}
	for _, s := range samples {
		if strings.Contains(s.labels["http_route"], "everything") {
			t.Errorf("a raw path is a route label: %+v", s)
		}
	}

	// Stopping: up exits 0 and the endpoint goes with it.
	up.Stop(t, 15*time.Second)
	if r := cli(t, bin, nats, "health", "--max-time", "1s", opsURL+"/healthz"); r.Code != 1 || !strings.Contains(r.Stderr, "no answer") {
		t.Errorf("mcpbus health after up exited: %s, want exit 1 and no answer", r)
	}
}

// bearerRT adds the API key to every request.
type bearerRT string

func (k bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}
