package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// The trace of a call crosses every hop: the caller's span is the parent of
// the runner's consumer span, whose context reaches the MCP server in
// params._meta.traceparent, and the call event carries the trace id.
func TestTraceContextCrossesEveryHop(t *testing.T) {
	exp, tp := recordSpans(t)

	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	ctx, root := tp.Tracer("test").Start(context.Background(), "agent turn")
	res, err := e.Client.Call(ctx, "alpha", "meta", nil, nil)
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	traceID := root.SpanContext().TraceID().String()
	var meta map[string]any
	if err := json.Unmarshal([]byte(text(t, res)), &meta); err != nil {
		t.Fatalf("meta tool: %v", err)
	}
	tp0, _ := meta["traceparent"].(string)
	if !strings.Contains(tp0, traceID) {
		t.Fatalf("MCP server got traceparent %q, want trace %s", tp0, traceID)
	}
	// The runner ends its spans after it replied: give it a moment.
	var send, process, client sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(3 * time.Second); (send == nil || process == nil || client == nil) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.SpanContext().TraceID().String() != traceID {
				continue
			}
			switch s.Name() {
			case "send mcp.v1.call.{server}.{tool}":
				send = s
			case "process mcp.v1.call.{server}.{tool}":
				process = s
			case "tools/call meta":
				client = s
			}
		}
	}
	if send == nil || process == nil || client == nil {
		t.Fatalf("spans of trace %s: send %v, process %v, tools/call %v", traceID, send != nil, process != nil, client != nil)
	}
	// send (PRODUCER) → process (CONSUMER, remote parent) → tools/call (CLIENT) → the MCP server.
	if send.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer || client.SpanKind() != trace.SpanKindClient {
		t.Fatalf("kinds: send %v, process %v, client %v", send.SpanKind(), process.SpanKind(), client.SpanKind())
	}
	if send.Parent().SpanID() != root.SpanContext().SpanID() || process.Parent().SpanID() != send.SpanContext().SpanID() ||
		!process.Parent().IsRemote() || client.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Fatal("spans are not chained agent turn → send → process → tools/call")
	}
	if !strings.Contains(tp0, client.SpanContext().SpanID().String()) {
		t.Fatalf("traceparent %q in _meta is not the tools/call span %s", tp0, client.SpanContext().SpanID())
	}
	want := map[string]string{
		"messaging.system": "nats", "messaging.destination.template": "mcp.v1.call.{server}.{tool}",
		"messaging.destination.name": "mcp.v1.call.alpha.meta", "messaging.operation.type": "send",
	}
	checkAttrs(t, send, want)
	checkAttrs(t, process, map[string]string{"messaging.system": "nats", "messaging.operation.type": "process",
		"messaging.consumer.group.name": "mcp.alpha"})
	checkAttrs(t, client, map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "meta",
		"gen_ai.operation.name": "execute_tool", "network.transport": "pipe", "mcpbus.server": "alpha",
		"jsonrpc.request.id": "*", "mcp.protocol.version": "*"})
	for _, s := range []sdktrace.ReadOnlySpan{send, process, client} {
		if strings.Contains(s.Name(), "_INBOX") || strings.Contains(s.Name(), "_I.") {
			t.Fatalf("span name %q names an inbox", s.Name())
		}
	}
}

// A failed call marks the client span ERROR with error.type.
func TestFailedCallSpan(t *testing.T) {
	exp, _ := recordSpans(t)

	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	if _, err := e.Client.Call(context.Background(), "alpha", "fail", json.RawMessage(`{"message":"boom"}`), nil); err != nil {
		t.Fatal(err)
	}
	var client sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(3 * time.Second); client == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "tools/call fail" {
				client = s
			}
		}
	}
	if client == nil {
		t.Fatal("no tools/call fail span")
	}
	if client.Status().Code != codes.Error {
		t.Fatalf("status %v, want Error", client.Status())
	}
	checkAttrs(t, client, map[string]string{"error.type": "tool_error"})
}

// checkAttrs fails unless span has every attribute of want ("*": any value).
func checkAttrs(t *testing.T, span sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, kv := range span.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || (v != "*" && g != v) {
			t.Errorf("span %q: %s = %q, want %q (all: %v)", span.Name(), k, g, v, got)
		}
	}
}

// recordSpans installs a tracer provider that keeps every span in memory
// until the test ends.
func recordSpans(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	return exp, tp
}
