package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

const instrumentation = "github.com/mcpbus/mcpbus/services/gateway/mcpserver"

// serverTelemetry is the gateway's MCP server instrumentation: a SERVER span
// per MCP request it answers and the mcp.server.operation.duration histogram.
type serverTelemetry struct {
	tracer   trace.Tracer
	duration telemetry.Histogram
}

func newServerTelemetry() serverTelemetry {
	d, _ := otel.Meter(instrumentation).Float64Histogram("mcp.server.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of an MCP request the gateway answered"))
	return serverTelemetry{tracer: otel.Tracer(instrumentation), duration: telemetry.NewHistogram(d)}
}

// opRequest is what the span of one MCP request is made of.
type opRequest struct {
	method, target string
	header         http.Header // the HTTP request's, for a traceparent
	meta           mcp.Meta    // the MCP request's _meta
	id             *jsonrpc.ID // nil when go-sdk keeps it to itself
	session        string
	protocol       string
	extra          []attribute.KeyValue
}

// start begins the SERVER span "{method} {target}". Its parent is the trace
// context the client put in _meta when the HTTP request carried none, linked
// to the HTTP server span; otherwise the HTTP server span itself.
func (t *serverTelemetry) start(ctx context.Context, in opRequest) (context.Context, *telemetry.Op) {
	attrs := make([]attribute.KeyValue, 0, 6+len(in.extra))
	attrs = append(attrs, conv.MCPMethodName.String(in.method), conv.TransportTCP)
	if in.protocol != "" {
		attrs = append(attrs, conv.MCPProtocolVersion.String(in.protocol))
	}
	attrs = append(attrs, in.extra...)
	ctx = headerContext(ctx, in.header)
	var opts []trace.SpanStartOption
	if in.header.Get("traceparent") == "" {
		if _, ok := in.meta["traceparent"].(string); ok {
			if remote := metaContext(ctx, in.meta); trace.SpanContextFromContext(remote).IsValid() {
				opts = append(opts, trace.WithLinks(trace.LinkFromContext(ctx)))
				ctx = remote
			}
		}
	}
	ctx, op := telemetry.StartOp(ctx, t.tracer, t.duration, conv.MCPSpanName(in.method, in.target), trace.SpanKindServer, attrs, opts...)
	if span := op.Span(); span.IsRecording() {
		if in.session != "" {
			span.SetAttributes(conv.MCPSessionID.String(in.session))
		}
		if in.id != nil && in.id.IsValid() {
			span.SetAttributes(conv.JSONRPCRequestID.String(fmt.Sprint(in.id.Raw())))
		}
	}
	return ctx, op
}

// errorType is error.type of err: the contract's code (also inside a
// JSON-RPC error's data), or else the JSON-RPC error code; "" for nil.
func errorType(err error) string {
	if err == nil {
		return ""
	}
	var w *jsonrpc.Error
	if errors.As(err, &w) {
		var c struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(w.Data, &c) == nil && c.Code != "" {
			return c.Code
		}
		return strconv.FormatInt(w.Code, 10)
	}
	return string(apierr.Of(err))
}

// metaContext returns ctx carrying the trace context an MCP client put in a
// request's _meta (traceparent, tracestate, baggage).
func metaContext(ctx context.Context, meta mcp.Meta) context.Context {
	return bus.Propagator().Extract(ctx, bus.MapCarrier(meta))
}

// headerContext returns ctx carrying the HTTP request's trace context when
// nothing upstream (the gateway's HTTP middleware) extracted it already.
func headerContext(ctx context.Context, h http.Header) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() || h.Get("traceparent") == "" {
		return ctx
	}
	return bus.Propagator().Extract(ctx, propagation.HeaderCarrier(h))
}

// sdkOpRequest describes a request go-sdk hands to the middleware.
func sdkOpRequest(method string, req mcp.Request) opRequest {
	in := opRequest{method: method}
	if extra := req.GetExtra(); extra != nil {
		in.header = extra.Header
	}
	if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
		in.meta = p.GetMeta()
	}
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		in.session = ss.ID()
		if ip := ss.InitializeParams(); ip != nil {
			in.protocol = ip.ProtocolVersion
		}
	}
	switch p := req.GetParams().(type) {
	case *mcp.CallToolParamsRaw:
		if p != nil {
			in.target = p.Name
			in.extra = []attribute.KeyValue{conv.GenAIToolName.String(p.Name), conv.OperationExecuteTool}
		}
	case *mcp.GetPromptParams:
		if p != nil {
			in.target = p.Name
			in.extra = []attribute.KeyValue{conv.GenAIPromptName.String(p.Name)}
		}
	case *mcp.ReadResourceParams:
		if p != nil {
			in.extra = []attribute.KeyValue{conv.MCPResourceURI.String(p.URI)}
		}
	}
	return in
}
