package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
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
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

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
	// The runner ends its consumer span after it replied: give it a moment.
	var sawProducer, sawConsumer bool
	for deadline := time.Now().Add(3 * time.Second); !(sawProducer && sawConsumer) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() != traceID {
				continue
			}
			switch s.SpanKind {
			case trace.SpanKindProducer:
				sawProducer = true
			case trace.SpanKindConsumer:
				sawConsumer = sawConsumer || (s.Parent.IsValid() && s.Parent.IsRemote())
			}
		}
	}
	if !sawProducer || !sawConsumer {
		t.Fatalf("spans of trace %s: producer %v, remote-parented consumer %v (%d spans)", traceID, sawProducer, sawConsumer, len(exp.GetSpans()))
	}
}
