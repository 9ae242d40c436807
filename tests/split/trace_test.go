package split

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/jaegertest"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The MCP server's service name in the trace (its -name and OTEL resource).
const tracedServerName = "split-traced-server"

// TestCallIsOneTraceInJaeger makes one tools/call through the gateway's /mcp
// of the split deployment (every service its own process, exporting OTLP to a
// real Jaeger: the gateway over HTTP, the runner over gRPC) and reads it back
// from Jaeger's query API as one trace: the gateway's HTTP and MCP server
// spans, its bus request, the runner's consumer and MCP client spans, and the
// MCP server's own span, continued from the request's _meta — each the child
// of the one before, with the kinds and attributes of the conventions.
func TestCallIsOneTraceInJaeger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Jaeger, a nats-server and six mcpbus processes")
	}
	j := jaegertest.Start(t)
	fast := "OTEL_BSP_SCHEDULE_DELAY=50" // export within 50 ms, not 5 s
	env := map[string][]string{
		"gateway": {"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLPHTTPEndpoint, fast},
		"runner": {"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + j.OTLPGRPCEndpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
			"OTEL_EXPORTER_OTLP_INSECURE=true", fast},
		"config": {"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLPHTTPEndpoint, fast},
	}
	d := startSplitEnv(t, startStandIns(t), env)
	defer d.stop(t)

	// The MCP server exports too: the config hands it the endpoint.
	r := d.cli(t, "", "servers", "add", serverName, "--binary", testServer, "--arg", "-name", "--arg", tracedServerName,
		"--env", "OTEL_EXPORTER_OTLP_ENDPOINT="+j.OTLPHTTPEndpoint, "--env", fast, "--enabled", "--json")
	if r.Code != 0 {
		t.Fatalf("servers add: %s", r)
	}
	d.waitState(t, model.StateRunning, 30*time.Second)

	// The client starts the trace: its traceparent names the root.
	const traceID = "5a1d7e0c2b9f4e3d8c6a1b0f9e8d7c6b"
	const clientSpan = "00f067aa0ba902b7"
	rt := &traceparentRT{base: d.http}
	client := mcp.NewClient(&mcp.Implementation{Name: "split-trace", Version: "1"}, nil)
	sess, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: d.httpURL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{key: d.adminKey(t), base: rt}}},
		// A session (2025-11-25), so the MCP span carries mcp.session.id; go-sdk
		// clients pick the sessionless 2026-07-28 by themselves.
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	waitMCPTools(t, sess, 20*time.Second, "listed the echo tool", func(names []string) bool { return len(names) > 0 })
	rt.traceparent.Store("00-" + traceID + "-" + clientSpan + "-01")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	tool := serverName + "__echo"
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": "traced"}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call %s: %v %+v", tool, err, res)
	}
	rt.traceparent.Store("")

	names := []string{"POST /mcp", "tools/call " + tool, "send mcp.v1.call.{server}.{tool}",
		"process mcp.v1.call.{server}.{tool}", "tools/call echo"}
	tr := j.WaitTrace(t, traceID, func(tr jaegertest.Trace) bool {
		for _, n := range names {
			if _, ok := tr.Find(n); !ok {
				return false
			}
		}
		return countSpans(tr, tracedServerName) > 0
	})
	t.Logf("%s", tr)

	// Each hop is the child of the one before, in the service and kind it belongs to.
	chain := []struct{ name, service, kind string }{
		{"POST /mcp", "mcpbus-gateway", "server"},
		{"tools/call " + tool, "mcpbus-gateway", "server"},
		{"send mcp.v1.call.{server}.{tool}", "mcpbus-gateway", "producer"},
		{"process mcp.v1.call.{server}.{tool}", "mcpbus-runner", "consumer"},
		{"tools/call echo", "mcpbus-runner", "client"},
		{"tools/call echo", tracedServerName, "server"},
	}
	parent := clientSpan
	for _, hop := range chain {
		var span jaegertest.Span
		found := false
		for _, s := range tr.Spans {
			if s.Name == hop.name && s.Service == hop.service {
				span, found = s, true
			}
		}
		if !found {
			t.Fatalf("no span %q of %s in the trace", hop.name, hop.service)
		}
		if span.Kind != hop.kind {
			t.Errorf("span %q of %s: kind %q, want %q", hop.name, hop.service, span.Kind, hop.kind)
		}
		if span.ParentSpanID != parent {
			t.Errorf("span %q of %s: parent %s, want %s", hop.name, hop.service, span.ParentSpanID, parent)
		}
		parent = span.SpanID
	}

	attrs := func(name, service string, want map[string]any) {
		t.Helper()
		for _, s := range tr.Spans {
			if s.Name != name || s.Service != service {
				continue
			}
			for k, v := range want {
				got, ok := s.Attributes[k]
				if !ok || (v != nil && got != v) {
					t.Errorf("span %q of %s: %s = %v, want %v", name, service, k, got, v)
				}
			}
			return
		}
	}
	attrs("POST /mcp", "mcpbus-gateway", map[string]any{"http.route": "/mcp", "http.request.method": "POST",
		"http.response.status_code": int64(200)})
	attrs("tools/call "+tool, "mcpbus-gateway", map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": tool,
		"gen_ai.operation.name": "execute_tool", "mcp.session.id": nil, "mcp.protocol.version": nil, "jsonrpc.request.id": nil})
	attrs("send mcp.v1.call.{server}.{tool}", "mcpbus-gateway", map[string]any{"messaging.system": "nats",
		"messaging.operation.type": "send", "messaging.destination.template": "mcp.v1.call.{server}.{tool}",
		"messaging.destination.name": "mcp.v1.call." + serverName + ".echo"})
	attrs("process mcp.v1.call.{server}.{tool}", "mcpbus-runner", map[string]any{"messaging.system": "nats",
		"messaging.operation.type": "process", "messaging.consumer.group.name": "mcp." + serverName})
	attrs("tools/call echo", "mcpbus-runner", map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
		"gen_ai.operation.name": "execute_tool", "network.transport": "pipe", "jsonrpc.request.id": nil,
		"mcp.protocol.version": nil})
	for _, s := range tr.Spans {
		if strings.Contains(s.Name, "_INBOX") || strings.Contains(s.Name, "_I.") {
			t.Errorf("span %q names an inbox", s.Name)
		}
		if _, ok := s.Attributes["gen_ai.tool.call.arguments"]; ok {
			t.Errorf("span %q recorded the tool's arguments without the operator's opt-in", s.Name)
		}
	}

	// The gateway's access log line of the call names the trace.
	for _, p := range d.procs {
		if p.Name() == "gateway" && !strings.Contains(p.Output(), `"trace_id":"`+traceID+`"`) {
			t.Errorf("no gateway log line carries trace_id %s", traceID)
		}
	}

	// A control-plane request is traced too: the CLI's config.create reaches
	// the config service, whose consumer span is exported.
	cfgTraces := j.WaitTraces(t, "mcpbus-config", func(trs []jaegertest.Trace) bool {
		for _, tr := range trs {
			if _, ok := tr.Find("process mcp.v1.config.create"); ok {
				return true
			}
		}
		return false
	})
	if len(cfgTraces) == 0 {
		t.Fatal("no config trace")
	}
}

func countSpans(tr jaegertest.Trace, service string) int {
	n := 0
	for _, s := range tr.Spans {
		if s.Service == service {
			n++
		}
	}
	return n
}

// traceparentRT sets the traceparent header while one is stored.
type traceparentRT struct {
	base        http.RoundTripper
	traceparent atomic.Value // string
}

func (rt *traceparentRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if tp, _ := rt.traceparent.Load().(string); tp != "" {
		r = r.Clone(r.Context())
		r.Header.Set("traceparent", tp)
	}
	return rt.base.RoundTrip(r)
}
