package runner

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// A task runs later than, and often elsewhere than, the request that made
// it: its work-queue message carries that request's trace context
// (traceparent), and each attempt at running it is a CONSUMER span
// ("process <prefix>.tasks.run.{server}") continuing it, the parent of the
// attempt's tools/call. The operator finds a task's run under the call or
// task request that asked for it, in one trace.

// taskRunMessage is the work-queue message of a task's run: its body, and the
// trace context of ctx in its headers when ctx has one.
func taskRunMessage(ctx context.Context, subject string, body []byte) *nats.Msg {
	msg := &nats.Msg{Subject: subject, Data: body}
	if trace.SpanContextFromContext(ctx).IsValid() {
		msg.Header = nats.Header{}
		bus.InjectTrace(ctx, msg.Header)
	}
	return msg
}

// startTaskRun starts the span of one attempt at running the task of msg.
func (s *server) startTaskRun(msg jetstream.Msg, taskID string) (context.Context, trace.Span) {
	ctx := bus.ExtractTrace(s.ctx, msg.Headers())
	if bus.TracingOff() && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(context.Background()) // a no-op span of its own
	}
	subject := msg.Subject()
	tmpl := strings.TrimSuffix(subject, s.slug) + "{server}"
	ctx, span := s.r.telemetry.tracer.Start(ctx, "process "+tmpl, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(conv.MessagingNATS, conv.ProcessOperation[0], conv.ProcessOperation[1],
			conv.MessagingDestinationName.String(subject), conv.MessagingDestinationTemplate.String(tmpl),
			conv.MessagingConsumerGroupName.String("task-"+s.slug), conv.MCPBusServer.String(s.slug),
			conv.MCPBusTaskID.String(taskID))
	}
	return ctx, span
}

// endTaskRun ends an attempt's span; err is the call's failure (nil for
// a result, a tool error included: the tools/call span says so).
func endTaskRun(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(conv.ErrorType.String(string(apierr.Of(err))))
		span.SetStatus(codes.Error, telemetry.StatusText(err.Error()))
	}
	span.End()
}
