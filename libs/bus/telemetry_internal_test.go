package bus

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// With no tracer provider, an untraced request makes no span (the saving),
// a traced one still carries its trace onward; once a provider is installed,
// every request is a span again.
func TestSendSpanWithoutProvider(t *testing.T) {
	if !TracingOff() {
		t.Fatal("a tracer provider is installed in this test process: the case under test is absent")
	}
	msg := &nats.Msg{Subject: "mcp.v1.call.s.t"}
	ctx := context.Background()
	got, span, tmpl, _ := sendSpan(ctx, msg)
	if got != ctx || span != noSpan || tmpl != "mcp.v1.call.{server}.{tool}" {
		t.Errorf("untraced request: ctx changed %v, span %T, template %q", got != ctx, span, tmpl)
	}

	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true})
	got, _, _, _ = sendSpan(trace.ContextWithRemoteSpanContext(ctx, parent), msg)
	h := nats.Header{}
	InjectTrace(got, h)
	if want := "00-01020300000000000000000000000000-0405000000000000-01"; h.Get("traceparent") != want {
		t.Errorf("traced request without a provider: traceparent %q, want %q", h.Get("traceparent"), want)
	}

	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	if TracingOff() {
		t.Fatal("TracingOff with a provider installed")
	}
	_, span, _, _ = sendSpan(ctx, msg)
	span.End()
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Name() != "send mcp.v1.call.{server}.{tool}" {
		t.Errorf("with a provider: ended spans %v", ended)
	}
}

// fakeRequest is a micro.Request answered nowhere.
type fakeRequest struct{ subject string }

func (fakeRequest) Respond([]byte, ...micro.RespondOpt) error               { return nil }
func (fakeRequest) RespondJSON(any, ...micro.RespondOpt) error              { return nil }
func (fakeRequest) Error(string, string, []byte, ...micro.RespondOpt) error { return nil }
func (fakeRequest) Data() []byte                                            { return nil }
func (fakeRequest) Headers() micro.Headers                                  { return nil }
func (r fakeRequest) Subject() string                                       { return r.subject }
func (fakeRequest) Reply() string                                           { return "" }

// A handler that panics still ends its request's span, as a failure (it
// was left open, never exported).
func TestPanickingHandlerEndsItsSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	func() {
		defer func() { _ = recover() }()
		Answer(fakeRequest{subject: "mcp.v1.config.get"}, func(context.Context, micro.Request) (any, error) { panic("boom") })
	}()
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "process mcp.v1.config.get" {
		t.Fatalf("ended spans %v, want the process span", ended)
	}
	if ended[0].Status().Code != codes.Error {
		t.Errorf("status %v, want ERROR", ended[0].Status())
	}
}
