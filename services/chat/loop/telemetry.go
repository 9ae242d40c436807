package loop

import (
	"context"
	"errors"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// instrumentation is the scope of the chat's spans and metrics.
const instrumentation = "github.com/mcpbus/mcpbus/services/chat"

// instruments are a turn's telemetry, after the semantic conventions for
// generative AI: the spans invoke_agent {profile} (a drive of the turn),
// chat {model} (a model step) and execute_tool {tool} (a tool call, parent
// of the bus request's PRODUCER span), and the gen_ai.client.* histograms
// of the model steps.
type instruments struct {
	tracer   trace.Tracer
	duration telemetry.Histogram
	tokens   metric.Int64Histogram
	// turns counts the drives of turns by how they ended.
	turns metric.Int64Counter
	// content records prompts, completions, tool arguments and results on
	// spans (operator opt-in, conv.CaptureContentEnv), redacted (scrub).
	content bool
}

// noDuration is the histogram of the ops measured by spans only: a turn's
// length says little, and the runner measures the tool calls themselves.
var noDuration telemetry.Histogram

// tokenBuckets are the conventions' advised bounds of gen_ai.client.token.usage.
var tokenBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}

func newInstruments() instruments {
	m := otel.Meter(instrumentation)
	d, _ := m.Float64Histogram(conv.GenAIClientOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of the model steps of chat turns"))
	tk, _ := m.Int64Histogram(conv.GenAIClientTokenUsage, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used by the model steps of chat turns"), metric.WithExplicitBucketBoundaries(tokenBuckets...))
	turns, _ := m.Int64Counter("mcpbus.chat.turns", metric.WithUnit("{turn}"),
		metric.WithDescription("Drives of chat turns by how they ended (mcpbus.chat.end_reason: final, max_steps, budget, cancelled, repeated_call, error, handed_off), provider and model"))
	return instruments{tracer: otel.Tracer(instrumentation), duration: telemetry.NewHistogram(d), tokens: tk, turns: turns, content: os.Getenv(conv.CaptureContentEnv) == "true"}
}

// modelAttrs are the low-cardinality attributes of a profile's model.
func modelAttrs(p model.Profile) []attribute.KeyValue {
	return []attribute.KeyValue{conv.GenAIProviderName.String(p.Provider), conv.GenAIRequestModel.String(p.Model)}
}

// errType is error.type of a failure: its contract code.
func errType(err error) string {
	if err == nil {
		return ""
	}
	return string(apierr.Of(err))
}

// startAgent starts the span of a drive of the turn.
func (t *turn) startAgent(ctx context.Context) (context.Context, *telemetry.Op) {
	in := &t.e.tel
	attrs := append([]attribute.KeyValue{conv.OperationInvokeAgent, conv.GenAIAgentName.String(t.profile.Name)}, modelAttrs(t.profile)...)
	ctx, op := telemetry.StartOp(ctx, in.tracer, noDuration, conv.GenAISpanName("invoke_agent", t.profile.Name), trace.SpanKindInternal, attrs)
	if op.Span().IsRecording() {
		op.Span().SetAttributes(conv.GenAIConversationID.String(t.conv), conv.MCPBusChatTurn.String(t.id))
	}
	return ctx, op
}

// endAgent ends it: a turn ended by a model error carries that error's
// type; one handed over to another instance is no failure.
func (t *turn) endAgent(ctx context.Context, op *telemetry.Op, done model.ChatDone, err error) {
	et, reason := errType(err), done.Reason
	switch {
	case errors.Is(err, ErrHandOff):
		et, err, reason = "", nil, handedOff
	case err == nil && done.Reason == model.TurnError:
		et = t.failure
	}
	if op.Span().IsRecording() && reason != "" {
		op.Span().SetAttributes(conv.MCPBusChatEndReason.String(reason))
	}
	if reason == "" {
		reason = "unknown"
	}
	t.e.tel.turns.Add(ctx, 1, metric.WithAttributes(append(modelAttrs(t.profile), conv.MCPBusChatEndReason.String(reason))...))
	op.End(ctx, et, err)
}

// handedOff is mcpbus.chat.end_reason of a drive stopped by ErrHandOff.
const handedOff = "handed_off"

// startChat starts the span and duration of a model step.
func (t *turn) startChat(ctx context.Context, req provider.Request) (context.Context, *telemetry.Op) {
	in := &t.e.tel
	attrs := append([]attribute.KeyValue{conv.OperationChat}, modelAttrs(t.profile)...)
	ctx, op := telemetry.StartOp(ctx, in.tracer, in.duration, conv.GenAISpanName("chat", t.profile.Model), trace.SpanKindClient, attrs)
	if span := op.Span(); span.IsRecording() {
		span.SetAttributes(conv.GenAIConversationID.String(t.conv))
		if in.content {
			span.SetAttributes(inputContent(req)...)
		}
	}
	return ctx, op
}

// endChat ends it with the step's usage and finish reason.
func (t *turn) endChat(ctx context.Context, op *telemetry.Op, reply provider.Step, err error) {
	in := &t.e.tel
	if err == nil {
		for _, u := range []struct {
			n    int64
			kind attribute.KeyValue
		}{{reply.Usage.InputTokens, conv.TokenTypeInput}, {reply.Usage.OutputTokens, conv.TokenTypeOutput}} {
			attrs := append([]attribute.KeyValue{conv.OperationChat, u.kind}, modelAttrs(t.profile)...)
			in.tokens.Record(ctx, u.n, metric.WithAttributes(attrs...))
		}
		if span := op.Span(); span.IsRecording() {
			span.SetAttributes(conv.GenAIUsageInputTokens.Int64(reply.Usage.InputTokens), conv.GenAIUsageOutputTokens.Int64(reply.Usage.OutputTokens))
			if reply.StopReason != "" {
				span.SetAttributes(conv.GenAIResponseFinishReasons.StringSlice([]string{string(reply.StopReason)}))
			}
			if in.content {
				span.SetAttributes(outputContent(reply, t.profile.TextToolCalls))
			}
		}
	}
	op.End(ctx, errType(err), err)
}

// startTool starts the span of a tool call.
func (t *turn) startTool(ctx context.Context, c StepCall) (context.Context, *telemetry.Op) {
	in := &t.e.tel
	attrs := []attribute.KeyValue{conv.OperationExecuteTool, conv.GenAIToolName.String(c.Name)}
	ctx, op := telemetry.StartOp(ctx, in.tracer, noDuration, conv.GenAISpanName("execute_tool", c.Name), trace.SpanKindInternal, attrs)
	if span := op.Span(); span.IsRecording() {
		span.SetAttributes(conv.GenAIToolCallID.String(c.ID))
		if in.content {
			span.SetAttributes(conv.GenAIToolCallArguments.String(scrub(c.Arguments)))
		}
	}
	return ctx, op
}

// Values of error.type of a tool call refused or cut short by the loop.
const (
	errInvalidArguments = "invalid_arguments"
	errUnknownTool      = "unknown_tool"
	errBreakerOpen      = "breaker_open"
	errDenied           = "denied"
	errTimeout          = "timeout"
	errCancelled        = "cancelled"
)

// endTool ends it. et is error.type when the loop knows it already.
func (t *turn) endTool(ctx context.Context, op *telemetry.Op, r ToolResult, ok bool, err error, et string) {
	switch {
	case err != nil:
		et = errType(err)
	case !ok:
		et = errCancelled
	case et == "" && r.IsError:
		et = conv.ToolError
	}
	if span := op.Span(); span.IsRecording() {
		if r.Server != "" {
			span.SetAttributes(conv.MCPBusServer.String(r.Server))
		}
		if t.e.tel.content && ok {
			span.SetAttributes(conv.GenAIToolCallResult.String(scrub(r.Content)))
		}
	}
	op.End(ctx, et, err)
}
