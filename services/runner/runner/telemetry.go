package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// callTelemetry is the runner's MCP client instrumentation: a CLIENT span per
// request to an MCP server and the mcp.client.operation.duration histogram.
type callTelemetry struct {
	tracer   trace.Tracer
	duration telemetry.Histogram
	// content records tool arguments and results on spans (operator opt-in).
	content bool
}

func newCallTelemetry() callTelemetry {
	d, _ := otel.Meter(tracerName).Float64Histogram("mcp.client.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of an MCP request the runner sent to an MCP server"))
	// A server names its tools, and an agent the prompt it asks for: a
	// server's names are bounded apart from another's.
	duration := telemetry.NewHistogram(d, telemetry.MCPBounds(telemetry.ScopeBy(conv.MCPBusServer))...)
	return callTelemetry{tracer: otel.Tracer(tracerName), duration: duration, content: os.Getenv(conv.CaptureContentEnv) == "true"}
}

// startOp starts the CLIENT span "{method} {target}" of a request to the MCP
// server of s, with the session's protocol, session id and transport.
func (s *server) startOp(ctx context.Context, sess *mcp.ClientSession, cfg *model.McpConfig, method, target string, extra ...attribute.KeyValue) (context.Context, *telemetry.Op) {
	t := &s.r.telemetry
	attrs := make([]attribute.KeyValue, 0, 8+len(extra))
	attrs = append(attrs, conv.MCPMethodName.String(method), conv.MCPBusServer.String(s.slug), transportAttr(cfg))
	if ir := sess.InitializeResult(); ir != nil && ir.ProtocolVersion != "" {
		attrs = append(attrs, conv.MCPProtocolVersion.String(ir.ProtocolVersion))
	}
	attrs = append(attrs, extra...)
	ctx, op := telemetry.StartOp(ctx, t.tracer, t.duration, conv.MCPSpanName(method, target), trace.SpanKindClient, attrs)
	if id := sess.ID(); id != "" && op.Span().IsRecording() {
		op.Span().SetAttributes(conv.MCPSessionID.String(id))
	}
	return ctx, op
}

// transportAttr is network.transport: pipe for a child on stdio, tcp for HTTP.
func transportAttr(cfg *model.McpConfig) attribute.KeyValue {
	if cfg.Transport.Type == model.TransportHTTP {
		return conv.TransportTCP
	}
	return conv.TransportPipe
}

// errType is error.type of a failed request: the contract's code.
func errType(err error) string {
	if err == nil {
		return ""
	}
	return string(apierr.Of(err))
}

// tracedTransport puts the JSON-RPC id of each request on the span of the
// context it is written under: go-sdk assigns ids below the API.
type tracedTransport struct{ mcp.Transport }

func (t tracedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return tracedConn{c}, nil
}

type tracedConn struct{ mcp.Connection }

func (c tracedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(conv.JSONRPCRequestID.String(fmt.Sprint(req.ID.Raw())))
		}
	}
	return c.Connection.Write(ctx, msg)
}

// redact hides the server's known secrets in text that leaves the runner
// (call events' errors, recorded tool content).
func (s *server) redact(text string) string {
	if r, ok := s.redactor.Load().(launch.Redactor); ok {
		return r.Redact(text)
	}
	return text
}

// injectMeta puts the trace context of ctx into the request's _meta
// (traceparent, tracestate) so an instrumented MCP server continues the trace.
func injectMeta(ctx context.Context, params *mcp.CallToolParams) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if params.Meta == nil {
		params.Meta = mcp.Meta{}
	}
	bus.InjectTraceMap(ctx, params.Meta)
}

// traceParams puts the trace context of ctx (the runner's CLIENT span)
// into the _meta of an rpc request's params, as injectMeta does for calls,
// in place of any trace context the caller wrote there: the server's span
// is the child of the runner's request, not of whatever span the caller named.
func traceParams(ctx context.Context, params any) {
	p, ok := params.(mcp.Params)
	if !ok {
		return
	}
	meta := p.GetMeta()
	for _, k := range bus.Propagator().Fields() {
		delete(meta, k)
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		if meta == nil {
			meta = map[string]any{}
		}
		bus.InjectTraceMap(ctx, meta)
	}
	if meta != nil {
		p.SetMeta(meta)
	}
}

// rpcTarget is the span target and attributes of an MCP request sent on the
// rpc subject: the prompt's name (span and metric), or the resource's URI
// (the span's alone: URIs are too many to name spans by, or to be a metric
// label).
func rpcTarget(in model.RPCRequest) (target string, extra, spanOnly []attribute.KeyValue) {
	var p struct {
		Name string `json:"name"`
		URI  string `json:"uri"`
	}
	switch in.Method {
	case "prompts/get":
		if json.Unmarshal(in.Params, &p) == nil && p.Name != "" {
			return p.Name, []attribute.KeyValue{conv.GenAIPromptName.String(p.Name)}, nil
		}
	case "resources/read":
		if json.Unmarshal(in.Params, &p) == nil && p.URI != "" {
			// Without userinfo, query and fragment: they may hold a credential.
			return "", nil, []attribute.KeyValue{conv.MCPResourceURI.String(conv.TraceURI(p.URI))}
		}
	}
	return "", nil, nil
}

// lastStart remembers the span of a server's last start, for the calls and
// control requests that waited behind it rather than asking for it (a start
// after a takeover, or one another request began): their spans link to it.
type lastStart struct {
	mu    sync.Mutex
	span  trace.SpanContext
	ended time.Time
}

// set records a start's span as it ends.
func (l *lastStart) set(sc trace.SpanContext, ended time.Time) {
	l.mu.Lock()
	l.span, l.ended = sc, ended
	l.mu.Unlock()
}

// linkIfWaited links the span of ctx to the last start when that start ended
// after since (the request waited for it) and is not the span's own child.
func (l *lastStart) linkIfWaited(ctx context.Context, since time.Time) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	l.mu.Lock()
	sc, ended := l.span, l.ended
	l.mu.Unlock()
	if !sc.IsValid() || ended.Before(since) || sc.TraceID() == span.SpanContext().TraceID() {
		return
	}
	span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("mcpbus.link", "waited for start")}})
}

// endStart ends the span of a start with its outcome and remembers it.
func (s *server) endStart(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(conv.ErrorType.String(string(apierr.Of(err))))
		span.SetStatus(codes.Error, telemetry.StatusText(err.Error()))
	}
	span.End()
	s.lastStart.set(span.SpanContext(), time.Now())
}
