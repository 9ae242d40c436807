//lint:file-ignore SA1019 sampling is deprecated by protocol 2026-07-28 (SEP-2577) but mcpbus relays it for servers that use it.

package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server's request to its caller during a call (sampling, elicitation)
// is relayed in the call's trace, whether the server asks within the call
// (protocol 2026-07-28) or on its session (older): its send span is under
// the runner's tools/call span, named by no inbox, and the caller's
// answer is a CONSUMER span under it.
func TestClientRequestRelayIsInTheCallsTrace(t *testing.T) {
	exp, tp := recordSpans(t)
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	// old's requests come on its session, not within the call (no multi
	// round-trip results before protocol 2026-07-28).
	e.Put(t, runnertest.Binary("old", testServer, "-protocols", "2025-11-25"))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	e.WaitState(t, "old", model.StateRunning, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx, root := tp.Tracer("test").Start(ctx, "agent turn")
	opts := &client.CallOptions{OnClientRequest: func(ctx context.Context, req model.ClientRequest) (any, error) {
		if req.Method == model.MethodElicit {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		}
		return &mcp.CreateMessageResult{Model: "m1", Role: "assistant", Content: &mcp.TextContent{Text: "42"}}, nil
	}}
	for _, server := range []string{"alpha", "old"} {
		for _, tool := range []string{"sample", "ask"} {
			if _, err := e.Client.Call(ctx, server, tool, json.RawMessage(`{"message":"6*7?"}`), opts); err != nil {
				t.Fatal(err)
			}
		}
	}
	root.End()

	traceID := root.SpanContext().TraceID()
	var sends, calls []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sends, calls = nil, nil
		answers := 0
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "process {inbox}" {
				answers++
			}
			if s.SpanKind() == trace.SpanKindProducer && !strings.Contains(s.Name(), "mcp.v1.call.") {
				sends = append(sends, s)
			}
			if s.Name() == "tools/call sample" || s.Name() == "tools/call ask" {
				calls = append(calls, s)
			}
		}
		if len(sends) >= 4 && len(calls) == 4 && answers >= 4 {
			break
		}
	}
	if len(sends) < 4 || len(calls) != 4 {
		t.Fatalf("relay send spans %d, tools/call spans %d", len(sends), len(calls))
	}
	for _, s := range sends {
		if strings.Contains(s.Name(), "_INBOX") || strings.Contains(s.Name(), "_I.") {
			t.Errorf("relay span name %q names an inbox", s.Name())
		}
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("relay span %q in trace %s, want the call's %s (parent %s)", s.Name(), s.SpanContext().TraceID(), traceID, s.Parent().SpanID())
			continue
		}
		// Its parent is the runner's tools/call span of the call it serves.
		var under string
		for _, c := range calls {
			if c.SpanContext().SpanID() == s.Parent().SpanID() {
				under = c.Name()
			}
		}
		if under == "" {
			t.Errorf("relay span %q: parent %s is no tools/call span", s.Name(), s.Parent().SpanID())
		}
		// The caller's answer is its consumer.
		var answered bool
		for _, p := range exp.GetSpans().Snapshots() {
			if p.Name() == "process {inbox}" && p.SpanKind() == trace.SpanKindConsumer && p.Parent().SpanID() == s.SpanContext().SpanID() {
				answered = true
			}
		}
		if !answered {
			t.Errorf("relay span %s has no 'process {inbox}' CONSUMER child (the caller's answer)", s.SpanContext().SpanID())
		}
	}
}
