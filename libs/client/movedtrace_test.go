package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// A call sent again after its runner let the server go (bus.ErrNotRun: a
// handover) stays in the caller's trace: each try is a send span under the
// caller's, the try that did not run marked ERROR, and the runner that ran
// it continues the second try's span.
func TestCallSentAgainAfterAHandOverIsOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	nc := testkit.Connect(t, testkit.NATS(t))
	var mu sync.Mutex
	var parents []trace.SpanContext // of each try, as the runner sees it
	sub, err := nc.Subscribe(bus.NewSubjects("").Call("alpha", "echo"), func(m *nats.Msg) {
		sc := trace.SpanContextFromContext(bus.ExtractTrace(context.Background(), m.Header))
		mu.Lock()
		parents = append(parents, sc)
		first := len(parents) == 1
		mu.Unlock()
		if first { // the old owner let the server go: the call did not run
			r := bus.ErrorMsg(apierr.New(apierr.ServiceUnavailable, "server alpha moved"))
			r.Header.Set(bus.HeaderNotRun, "true")
			_ = m.RespondMsg(r)
			return
		}
		_ = m.Respond([]byte(`{"content":[]}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx, root := tp.Tracer("test").Start(ctx, "agent turn")
	if _, err := client.New(nc, client.Options{}).Call(ctx, "alpha", "echo", []byte(`{}`), nil); err != nil {
		t.Fatal(err)
	}
	root.End()

	var sends []sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "send mcp.v1.call.{server}.{tool}" {
			sends = append(sends, s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sends) != 2 || len(parents) != 2 {
		t.Fatalf("%d send spans, %d tries reached the runner; want 2 of each", len(sends), len(parents))
	}
	for i, s := range sends {
		if s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("try %d: send span's parent %s, want the caller's %s", i+1, s.Parent().SpanID(), root.SpanContext().SpanID())
		}
		if parents[i].SpanID() != s.SpanContext().SpanID() || parents[i].TraceID() != root.SpanContext().TraceID() {
			t.Errorf("try %d reached the runner under %s/%s, want its send span %s in trace %s", i+1,
				parents[i].TraceID(), parents[i].SpanID(), s.SpanContext().SpanID(), root.SpanContext().TraceID())
		}
	}
	if sends[0].Status().Code != codes.Error || sends[1].Status().Code == codes.Error {
		t.Errorf("statuses %v, %v: want the try that did not run ERROR, the next not", sends[0].Status(), sends[1].Status())
	}
}
