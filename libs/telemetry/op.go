package telemetry

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// Op is one timed operation: a span, and a sample of a duration histogram
// with the same attributes when it ends (mcp.client.operation.duration and
// mcp.server.operation.duration are recorded this way).
type Op struct {
	span     trace.Span
	duration Histogram
	start    time.Time
	attrs    []attribute.KeyValue
}

// noSpan is a no-op span of its own: ending it ends no one else's.
var noSpan = trace.SpanFromContext(context.Background())

// StartOp starts the span name of kind with attrs; the span's parent is the
// span of ctx unless opts say otherwise.
func StartOp(ctx context.Context, tracer trace.Tracer, duration Histogram, name string, kind trace.SpanKind,
	attrs []attribute.KeyValue, opts ...trace.SpanStartOption) (context.Context, *Op) {
	if tracingOff() && !trace.SpanContextFromContext(ctx).IsValid() {
		// The span would be a no-op one: skip making it (~5 allocations).
		return ctx, &Op{span: noSpan, duration: duration, start: time.Now(), attrs: attrs}
	}
	ctx, span := tracer.Start(ctx, name, append(opts, trace.WithSpanKind(kind))...)
	if span.IsRecording() {
		span.SetAttributes(attrs...)
	}
	return ctx, &Op{span: span, duration: duration, start: time.Now(), attrs: attrs}
}

// Span is the operation's span, for attributes known only later.
func (o *Op) Span() trace.Span { return o.span }

// Relabel sets the value kv gives its key in the duration sample End
// records, when the operation started with that key; the span keeps the
// value it started with. It is for a label that turns out to be a client's
// word only once the operation failed (the name of a prompt the server
// does not have), which the metric records as Other.
func (o *Op) Relabel(kv attribute.KeyValue) {
	for i, a := range o.attrs {
		if a.Key == kv.Key {
			o.attrs = slices.Clone(o.attrs) // the caller's slice stays as it was
			o.attrs[i] = kv
			return
		}
	}
}

// End ends the operation. errType is "" on success, else error.type: the
// error's code, or "tool_error" for a tool result with isError; the span's
// status is then ERROR with err's message (errType when err is nil).
func (o *Op) End(ctx context.Context, errType string, err error) {
	attrs := o.attrs
	if errType != "" {
		attrs = append(attrs, conv.ErrorType.String(errType))
		if o.span.IsRecording() {
			o.span.SetAttributes(conv.ErrorType.String(errType))
			msg := errType
			if err != nil {
				msg = err.Error()
			}
			o.span.SetStatus(codes.Error, StatusText(msg))
		}
	}
	o.duration.Record(ctx, time.Since(o.start).Seconds(), attrs)
	o.span.End()
}
