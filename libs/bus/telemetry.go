package bus

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

const instrumentation = "github.com/mcpbus/mcpbus/libs/bus"

// Template is the low-cardinality form of a request subject, the messaging
// conventions' destination template: the variable tokens (server, tool) of
// the call, rpc, control (and control.<server>.all) and cancel subjects, the OAuth flow of a relayed
// callback and the gateway instance of a relayed retry become
// placeholders. Reading from the end keeps any prefix as it is. A reply
// inbox (NATS's _INBOX, or an identity's _I.<name>: access.InboxRoot) is
// {inbox} whole: the runner sends a server's requests to its caller's
// inbox (Mcp-Client-Subject), one subject per call, which would be a span
// name and a metric series each.
func Template(subject string) string {
	if strings.HasPrefix(subject, "_INBOX.") || strings.HasPrefix(subject, "_I.") {
		return "{inbox}"
	}
	last := strings.LastIndexByte(subject, '.')
	if last < 0 {
		return subject
	}
	mid := strings.LastIndexByte(subject[:last], '.')
	switch subject[mid+1 : last] {
	case "rpc", "control", "cancel":
		return subject[:last] + ".{server}"
	case "callback": // one flow id per sign-in: a series each
		if strings.HasSuffix(subject[:mid], "oauth") {
			return subject[:last] + ".{flow}"
		}
	case "retry": // one instance id per gateway start
		if strings.HasSuffix(subject[:mid], "gateway") {
			return subject[:last] + ".{instance}"
		}
	}
	if mid < 0 {
		return subject
	}
	first := strings.LastIndexByte(subject[:mid], '.')
	switch subject[first+1 : mid] {
	case "call":
		return subject[:mid] + ".{server}.{tool}"
	case "control": // control.<server>.all
		if subject[last+1:] == "all" {
			return subject[:mid] + ".{server}.all"
		}
	case "events":
		return subject[:last] + ".{name}"
	}
	return subject
}

// instruments are the tracer and histogram of the global providers, cached
// per provider: looking them up per request costs a lock, and a test that
// installs its own provider must still be seen.
type instruments struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	tracer   trace.Tracer
	duration telemetry.Histogram
	off      bool // tp is otel's default: every span is a no-op one
}

// defaultProvider is the type of the global tracer provider before anyone
// sets one (otel's internal delegate), nil if it cannot be told apart.
var defaultProvider = func() reflect.Type {
	t := reflect.TypeOf(otel.GetTracerProvider())
	if t == nil || t.String() != "*global.tracerProvider" {
		return nil
	}
	return t
}()

// noSpan is a no-op span of its own: ending it ends no one else's.
var noSpan = trace.SpanFromContext(context.Background())

// TracingOff reports whether no tracer provider has been installed
// (telemetry.Setup installs one only when export is on): every span started
// now is a no-op one, so a request without a trace context may skip making
// it (its allocations are per request).
func TracingOff() bool { return current().off }

var cached atomic.Pointer[instruments]

func current() *instruments {
	tp, mp := otel.GetTracerProvider(), otel.GetMeterProvider()
	if in := cached.Load(); in != nil && in.tp == tp && in.mp == mp {
		return in
	}
	in := &instruments{tp: tp, mp: mp, tracer: tp.Tracer(instrumentation),
		off: defaultProvider != nil && reflect.TypeOf(tp) == defaultProvider}
	d, _ := mp.Meter(instrumentation).Float64Histogram("messaging.client.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of a request on the bus, until its reply"))
	in.duration = telemetry.NewHistogram(d)
	cached.Store(in)
	return in
}

// sendSpan starts the PRODUCER span of a request ("send <template>").
func sendSpan(ctx context.Context, msg *nats.Msg) (context.Context, trace.Span, string, *instruments) {
	in := current()
	tmpl := Template(msg.Subject)
	if in.off && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, noSpan, tmpl, in // the span would be a no-op one
	}
	ctx, span := in.tracer.Start(ctx, "send "+tmpl, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(conv.MessagingNATS, conv.SendOperation[0], conv.SendOperation[1],
			conv.MessagingDestinationName.String(msg.Subject), conv.MessagingDestinationTemplate.String(tmpl),
			conv.MessagingMessageBodySize.Int(len(msg.Data)))
	}
	return ctx, span, tmpl, in
}

// endSend ends a request's span and records its duration.
func endSend(ctx context.Context, in *instruments, span trace.Span, tmpl string, start time.Time, err error) {
	attrs := []attribute.KeyValue{conv.MessagingNATS, conv.SendOperation[1], conv.MessagingDestinationTemplate.String(tmpl)}
	if err != nil {
		code := string(apierr.Of(err))
		attrs = append(attrs, conv.ErrorType.String(code))
		if span.IsRecording() {
			span.SetAttributes(conv.ErrorType.String(code))
			span.SetStatus(codes.Error, telemetry.StatusText(err.Error()))
		}
	}
	in.duration.Record(ctx, time.Since(start).Seconds(), attrs)
	span.End()
}

// groupRequest carries the queue group of the endpoint that got the request,
// for the consumer span.
type groupRequest struct {
	micro.Request
	group string
}

// withGroup makes the endpoint's queue group visible to ProcessSpan.
func withGroup(h micro.Handler, group string) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) { h.Handle(groupRequest{req, group}) })
}

// ProcessSpan starts the CONSUMER span of a request received by a service
// ("process <template>"), continuing the caller's trace from its headers.
// End it once the reply is sent.
func ProcessSpan(ctx context.Context, req micro.Request) (context.Context, trace.Span) {
	group := ""
	if g, ok := req.(groupRequest); ok {
		group = g.group
	}
	return processSpan(ctx, req.Subject(), nats.Header(req.Headers()), len(req.Data()), group)
}

// ProcessMsgSpan is ProcessSpan for a request taken by a plain subscription.
func ProcessMsgSpan(ctx context.Context, m *nats.Msg) (context.Context, trace.Span) {
	return processSpan(ctx, m.Subject, m.Header, len(m.Data), "")
}

func processSpan(ctx context.Context, subject string, h nats.Header, size int, group string) (context.Context, trace.Span) {
	ctx = ExtractTrace(ctx, h)
	in := current()
	if in.off && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, noSpan // the span would be a no-op one
	}
	tmpl := Template(subject)
	ctx, span := in.tracer.Start(ctx, "process "+tmpl, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(conv.MessagingNATS, conv.ProcessOperation[0], conv.ProcessOperation[1],
			conv.MessagingDestinationName.String(subject), conv.MessagingDestinationTemplate.String(tmpl),
			conv.MessagingMessageBodySize.Int(size))
		if group != "" {
			span.SetAttributes(conv.MessagingConsumerGroupName.String(group))
		}
	}
	return ctx, span
}

// EndProcess records err on the consumer span (error.type is the contract's
// code) and ends it (at the time opts give, when it ends after the reply).
func EndProcess(span trace.Span, err error, opts ...trace.SpanEndOption) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(conv.ErrorType.String(string(apierr.Of(err))))
		span.SetStatus(codes.Error, telemetry.StatusText(err.Error()))
	}
	span.End(opts...)
}
