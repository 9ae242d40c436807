// Package conv holds the OpenTelemetry semantic-convention names mcpbus uses:
// the MCP, GenAI and messaging attribute keys that the semconv Go package does
// not define yet (defined once here), and the span names built from them.
package conv

import (
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// SchemaURL is the semantic-conventions version the names follow.
const SchemaURL = semconv.SchemaURL

// MCP attributes (semantic conventions for the Model Context Protocol).
const (
	MCPMethodName      = attribute.Key("mcp.method.name")
	MCPProtocolVersion = attribute.Key("mcp.protocol.version")
	MCPSessionID       = attribute.Key("mcp.session.id")
	MCPResourceURI     = attribute.Key("mcp.resource.uri")
)

// GenAI attributes (semantic conventions for generative AI).
const (
	GenAIOperationName         = attribute.Key("gen_ai.operation.name")
	GenAIToolName              = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID            = attribute.Key("gen_ai.tool.call.id")
	GenAIToolCallArguments     = attribute.Key("gen_ai.tool.call.arguments")
	GenAIToolCallResult        = attribute.Key("gen_ai.tool.call.result")
	GenAIPromptName            = attribute.Key("gen_ai.prompt.name")
	GenAIProviderName          = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel          = attribute.Key("gen_ai.request.model")
	GenAIAgentName             = attribute.Key("gen_ai.agent.name")
	GenAIConversationID        = attribute.Key("gen_ai.conversation.id")
	GenAIUsageInputTokens      = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutputTokens     = attribute.Key("gen_ai.usage.output_tokens")
	GenAIResponseFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	GenAITokenType             = attribute.Key("gen_ai.token.type")
	GenAISystemInstructions    = attribute.Key("gen_ai.system_instructions")
	GenAIInputMessages         = attribute.Key("gen_ai.input.messages")
	GenAIOutputMessages        = attribute.Key("gen_ai.output.messages")
)

// GenAI client metrics: the duration of operations (s) and the tokens of
// model calls ({token}).
const (
	GenAIClientOperationDuration = "gen_ai.client.operation.duration"
	GenAIClientTokenUsage        = "gen_ai.client.token.usage"
)

// Values of gen_ai.operation.name and gen_ai.token.type.
var (
	// OperationExecuteTool is gen_ai.operation.name of a tool call.
	OperationExecuteTool = GenAIOperationName.String("execute_tool")
	OperationChat        = GenAIOperationName.String("chat")
	OperationInvokeAgent = GenAIOperationName.String("invoke_agent")
	TokenTypeInput       = GenAITokenType.String("input")
	TokenTypeOutput      = GenAITokenType.String("output")
)

// GenAISpanName is "{operation} {target}" (the model, agent or tool name),
// or the operation alone without a target.
func GenAISpanName(operation, target string) string { return MCPSpanName(operation, target) }

// ToolError is error.type of a tool result with isError: true.
const ToolError = "tool_error"

// mcpbus's own attributes: the server slug a call goes to; the chat turn
// an invoke_agent span runs and why it ended (model.ChatDone's reason).
const (
	MCPBusServer        = attribute.Key("mcpbus.server")
	MCPBusChatTurn      = attribute.Key("mcpbus.chat.turn")
	MCPBusChatEndReason = attribute.Key("mcpbus.chat.end_reason")
	// The runner that starts a server, and the package type it launches.
	MCPBusRunner      = attribute.Key("mcpbus.runner")
	MCPBusPackageType = attribute.Key("mcpbus.package_type")
	// The durable task a run is an attempt at.
	MCPBusTaskID = attribute.Key("mcpbus.task.id")
)

// Keys the semconv package has, re-exported so callers import one package.
const (
	ErrorType                    = semconv.ErrorTypeKey
	ProcessPID                   = semconv.ProcessPIDKey
	JSONRPCRequestID             = semconv.JSONRPCRequestIDKey
	MessagingSystem              = semconv.MessagingSystemKey
	MessagingOperationType       = semconv.MessagingOperationTypeKey
	MessagingOperationName       = semconv.MessagingOperationNameKey
	MessagingDestinationName     = semconv.MessagingDestinationNameKey
	MessagingDestinationTemplate = semconv.MessagingDestinationTemplateKey
	MessagingConsumerGroupName   = semconv.MessagingConsumerGroupNameKey
	MessagingMessageBodySize     = semconv.MessagingMessageBodySizeKey
	NetworkTransport             = semconv.NetworkTransportKey
)

// Values.
var (
	// MessagingNATS is messaging.system for NATS (not in the semconv enum).
	MessagingNATS = MessagingSystem.String("nats")
	SendOperation = []attribute.KeyValue{
		MessagingOperationType.String("send"), MessagingOperationName.String("send"),
	}
	ProcessOperation = []attribute.KeyValue{
		MessagingOperationType.String("process"), MessagingOperationName.String("process"),
	}
	TransportPipe = semconv.NetworkTransportPipe
	TransportTCP  = semconv.NetworkTransportTCP
)

// MCPSpanName is "{method} {target}" (target: the tool or prompt name), or
// the method alone when there is no low-cardinality target. A target longer
// than MaxSpanTarget bytes is cut (at a character boundary, "…" marking the
// cut): it may be a name a client or a model made up (a tools/call of an
// unknown tool), and the SDK bounds attributes, not span names.
func MCPSpanName(method, target string) string {
	if target == "" {
		return method
	}
	if len(target) > MaxSpanTarget {
		cut := MaxSpanTarget - len("…")
		for cut > 0 && !utf8.RuneStart(target[cut]) {
			cut--
		}
		target = target[:cut] + "…"
	}
	return method + " " + target
}

// MaxSpanTarget bounds the target of a span name: room for any namespaced
// tool name (a server slug, "__", and a tool name of at most 128 bytes).
const MaxSpanTarget = 256

// CaptureContentEnv is the standard GenAI instrumentation switch: tool
// arguments and results are recorded on spans only when it is "true".
const CaptureContentEnv = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

// TraceURI is uri as a span records it (mcp.resource.uri): without its
// userinfo (user:password@), query and fragment, which may hold a
// credential (a presigned URL's signature, a token parameter) that every
// reader of the traces would see. The scheme, host and path stay: enough
// to tell which resource a request read.
func TraceURI(uri string) string {
	if i := strings.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	// The authority follows "scheme://" (or a leading "//"), up to the
	// path; its userinfo ends at its last '@'.
	i := strings.Index(uri, "//")
	if i < 0 || !schemePrefix(uri[:i]) {
		return uri
	}
	start := i + 2
	end := len(uri)
	if j := strings.IndexByte(uri[start:], '/'); j >= 0 {
		end = start + j
	}
	if at := strings.LastIndexByte(uri[start:end], '@'); at >= 0 {
		uri = uri[:start] + uri[start+at+1:]
	}
	return uri
}

// schemePrefix reports whether s is "" or "scheme:" (RFC 3986 §3.1).
func schemePrefix(s string) bool {
	if s == "" {
		return true
	}
	name, ok := strings.CutSuffix(s, ":")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}
