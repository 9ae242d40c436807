package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// With no tracer provider an untraced operation makes no span; a traced one
// still continues its caller's trace; with a provider every operation is a
// span again.
func TestStartOpWithoutProvider(t *testing.T) {
	if !tracingOff() {
		t.Fatal("a tracer provider is installed in this test process: the case under test is absent")
	}
	h, _ := noop.NewMeterProvider().Meter("t").Float64Histogram("d")
	hist := NewHistogram(h)
	ctx := context.Background()
	got, op := StartOp(ctx, otel.Tracer("t"), hist, "op", trace.SpanKindServer, nil)
	if got != ctx || op.Span() != noSpan {
		t.Errorf("untraced operation: ctx changed %v, span %T", got != ctx, op.Span())
	}
	op.End(got, "", nil)

	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled, Remote: true})
	got, op = StartOp(trace.ContextWithRemoteSpanContext(ctx, parent), otel.Tracer("t"), hist, "op", trace.SpanKindServer, nil)
	if sc := trace.SpanContextFromContext(got); sc.TraceID() != parent.TraceID() {
		t.Errorf("traced operation without a provider: trace id %v, want %v", sc.TraceID(), parent.TraceID())
	}
	op.End(got, "", nil)

	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(tracenoop.NewTracerProvider()) })
	got, op = StartOp(ctx, otel.Tracer("t"), hist, "op", trace.SpanKindServer, nil)
	op.End(got, "", nil)
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Name() != "op" {
		t.Errorf("with a provider: ended spans %v", ended)
	}
}
