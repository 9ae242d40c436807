package telemetry

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The provider Setup installs bounds what a client can put on a span: a
// header of 64 KiB that otelhttp records (user_agent.original), an error
// message quoting a request. The export queue holds 2048 spans until sent.
func TestProviderBoundsClientStrings(t *testing.T) {
	t.Setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "")
	t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "")
	exp := tracetest.NewInMemoryExporter()
	tp := newProvider(sdktrace.WithSyncer(exp), resource.Empty())
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	huge := strings.Repeat("é", 1<<19) // 1 MiB
	h, _ := noop.NewMeterProvider().Meter("t").Float64Histogram("d")
	// A caller's trace context, so StartOp makes the span with no global provider.
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled, Remote: true}))
	ctx, op := StartOp(parent, tp.Tracer("t"), NewHistogram(h), "op", trace.SpanKindServer,
		[]attribute.KeyValue{attribute.String("user_agent.original", huge)})
	op.Span().SetAttributes(attribute.String("mcp.resource.uri", huge))
	op.End(ctx, "NOT_FOUND", errString("unknown tool "+huge))

	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	for _, kv := range s.Attributes {
		if n := utf8.RuneCountInString(kv.Value.AsString()); n > DefaultAttributeValueLength {
			t.Errorf("%s: %d characters, want at most %d", kv.Key, n, DefaultAttributeValueLength)
		}
	}
	if s.Status.Code != codes.Error || len(s.Status.Description) > maxStatusLen || !utf8.ValidString(s.Status.Description) ||
		!strings.HasPrefix(s.Status.Description, "unknown tool é") {
		t.Errorf("status %v, %d bytes: want ERROR, a valid prefix of the message, at most %d bytes",
			s.Status.Code, len(s.Status.Description), maxStatusLen)
	}
}

// The operator's OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT wins, -1 (no bound) included.
func TestSpanLimitsFromTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "")
	t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "")
	if got := SpanLimits().AttributeValueLengthLimit; got != DefaultAttributeValueLength {
		t.Errorf("default: %d, want %d", got, DefaultAttributeValueLength)
	}
	t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "100")
	if got := SpanLimits().AttributeValueLengthLimit; got != 100 {
		t.Errorf("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=100: %d", got)
	}
	t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "-1")
	if got := SpanLimits().AttributeValueLengthLimit; got != -1 {
		t.Errorf("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=-1: %d", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// A client's traceparent with the sampled flag 0 does not keep its call
// out of the operator's traces; OTEL_TRACES_SAMPLER still rules when set.
func TestProviderSamplesWhatClientsDoNot(t *testing.T) {
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}, Remote: true})) // flags 00
	for _, c := range []struct {
		sampler string
		want    bool
	}{{"", true}, {"parentbased_always_on", false}, {"always_off", false}} {
		t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
		tp := newProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()), resource.Empty())
		_, span := tp.Tracer("t").Start(unsampled, "POST /mcp", trace.WithSpanKind(trace.SpanKindServer))
		if got := span.SpanContext().IsSampled(); got != c.want || span.SpanContext().TraceID() != (trace.TraceID{7}) {
			t.Errorf("OTEL_TRACES_SAMPLER=%q: sampled %v in trace %v, want %v in the caller's trace", c.sampler, got, span.SpanContext().TraceID(), c.want)
		}
		span.End()
		_ = tp.Shutdown(context.Background())
	}
}
