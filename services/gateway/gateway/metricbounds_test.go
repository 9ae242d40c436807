package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// Whatever a client sends, the process's metrics keep a bounded number of
// series: 10,000 distinct values of each string a client chooses (a raw
// path, an HTTP method, the name of a tool or a prompt that does not exist,
// on /mcp and /mcp/invoke) leave the gateway's and the runner's metrics
// (and the bus's) with a few dozen series, not one per value.
func TestMetricSeriesBoundedAgainstClientStrings(t *testing.T) {
	if testing.Short() {
		t.Skip("60,000 requests")
	}
	reader := testkit.MeterReader(t) // before the gateway and runner make their instruments
	e := runnertest.Start(t, quietRunner())
	h := startGateway(t, e, gateway.Options{RateRPS: 1e6, RateBurst: 1e6})
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__echo")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &taggedRT{key: h.admin, tag: "bounds"}}
	// send makes one request; JSON-RPC ones go in session sid.
	send := func(method, path, sid, body string) string {
		req, err := http.NewRequestWithContext(ctx, method, h.url+path, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return ""
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return ""
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.Header.Get("Mcp-Session-Id")
	}
	sid := send("POST", "/mcp", "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if sid == "" {
		t.Fatal("initialize: no session")
	}
	send("POST", "/mcp", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	rpc := func(id int, method, params string) {
		send("POST", "/mcp", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	}
	const n, workers = 10_000, 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				send("GET", fmt.Sprint("/nope/", i), "", "")
				send(fmt.Sprint("M", i), "/mcp", "", "")
				send("POST", "/mcp/invoke", "", fmt.Sprintf(`{"tool_name":"alpha__nope%d","params":{}}`, i))
				rpc(i, "tools/call", fmt.Sprintf(`{"name":"alpha__nope%d","arguments":{}}`, i))
				rpc(i, "tools/call", fmt.Sprintf(`{"name":"nosuch%d__t","arguments":{}}`, i))
				rpc(i, "prompts/get", fmt.Sprintf(`{"name":"alpha__p%d"}`, i))
			}
		})
	}
	wg.Wait()
	rpc(n, "tools/call", `{"name":"alpha__echo","arguments":{"message":"hi"}}`)
	// The gateway records a request's sample once its answer is written.
	var series []string
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		series = series[:0]
		echo, prompts := false, false
		for s := range testkit.Metrics(t, reader) {
			series = append(series, s)
			echo = echo || strings.Contains(s, "gen_ai.tool.name=alpha__echo")
			prompts = prompts || strings.HasPrefix(s, "mcp.client.operation.duration|") && strings.Contains(s, "prompts/get")
		}
		return echo && prompts, fmt.Sprintf("no sample of alpha__echo or of the runner's prompts/get among %v", series)
	})
	// Measured: 79, of which 64 are the runner's gen_ai.prompt.name values
	// of alpha (MaxPromptNames, then _OTHER), the rest a route, a method or
	// an error type by status.
	if len(series) > 100 {
		t.Errorf("%d series after %d distinct values of each client string, want at most 100: %.3000v", len(series), n, series)
	}
}
