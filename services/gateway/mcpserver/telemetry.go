package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

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
	// Tool and prompt names are namespaced ("server__tool"): each server's
	// names are bounded apart (metricNames keeps out the names a client
	// invents).
	duration := telemetry.NewHistogram(d, telemetry.MCPBounds(telemetry.ScopeByPrefix("__"))...)
	return serverTelemetry{tracer: otel.Tracer(instrumentation), duration: duration}
}

// opRequest is what the span of one MCP request is made of.
type opRequest struct {
	method, target string
	header         http.Header // the HTTP request's, for a traceparent
	meta           mcp.Meta    // the MCP request's _meta
	id             *jsonrpc.ID // nil when go-sdk keeps it to itself
	session        string
	protocol       string
	extra          []attribute.KeyValue // the span's and the duration sample's
	spanOnly       []attribute.KeyValue // the span's alone: too many values for a metric label
}

// metricNames makes in's tool or prompt name Other in the duration sample
// unless a server listed it: a tool of the catalog or of v (search mode's
// own), a prompt the gateway learnt from a list. A client may ask for any
// name, and each was a series; the names servers list are bounded per
// server (MCPBounds). The span keeps the name.
func (a *Aggregator) metricNames(v *view, in *opRequest) {
	for i, kv := range in.extra {
		name := kv.Value.AsString()
		var known bool
		switch kv.Key {
		case conv.GenAIToolName:
			a.mu.Lock()
			known = a.tools[name] != nil || v.tool(name) != nil || name == SearchToolsName || name == CallToolName
			a.mu.Unlock()
		case conv.GenAIPromptName:
			_, known = a.prompts.Load(name)
		default:
			continue
		}
		if !known {
			in.extra = slices.Clone(in.extra)
			in.extra[i] = kv.Key.String(telemetry.Other)
			in.spanOnly = append(in.spanOnly, kv)
		}
	}
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
		span.SetAttributes(in.spanOnly...)
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

// headerContext returns ctx carrying the HTTP request's trace context: the
// gateway's HTTP server span that Handler marked in h (spanHeader), else
// the client's traceparent header when nothing upstream (the gateway's
// HTTP middleware) extracted it already. The mark matters for go-sdk's
// path in a session: go-sdk runs a session's requests under the context
// of the request that opened it, so without it every later request of the
// session was a child of the long-ended initialize request's span.
func headerContext(ctx context.Context, h http.Header) context.Context {
	if v := h.Get(spanHeader); v != "" {
		remote := traceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": v})
		if sc := trace.SpanContextFromContext(remote); sc.IsValid() {
			return trace.ContextWithSpanContext(ctx, sc.WithRemote(false))
		}
	}
	if trace.SpanContextFromContext(ctx).IsValid() || h.Get("traceparent") == "" {
		return ctx
	}
	return bus.Propagator().Extract(ctx, propagation.HeaderCarrier(h))
}

// spanHeader carries the HTTP request's span (a traceparent value) from
// Handler to the MCP server span of the request, across go-sdk. Handler
// removes any a client sent.
const spanHeader = "Mcpbus-Http-Span"

// traceContext is the W3C traceparent codec alone (no baggage).
var traceContext propagation.TraceContext

// markSpan puts the span of r's context (the HTTP server span) in
// spanHeader, replacing whatever the client wrote there.
func markSpan(r *http.Request) {
	r.Header.Del(spanHeader)
	if !trace.SpanContextFromContext(r.Context()).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(r.Context(), c)
	if v := c["traceparent"]; v != "" {
		r.Header.Set(spanHeader, v)
	}
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
			in.protocol = negotiated(ip.ProtocolVersion)
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
			in.spanOnly = []attribute.KeyValue{conv.MCPResourceURI.String(traceURI(p.URI))}
		}
	}
	return in
}

// traceURI is a resource URI as the span records it: the server's URI
// inside without its credentials (conv.TraceURI), which the escaping
// would otherwise carry past conv.TraceURI; a gateway URI that does not
// parse keeps its server part alone.
func traceURI(uri string) string {
	if server, original, ok := parseURI(uri); ok {
		return resourceURI(server, conv.TraceURI(original))
	}
	if rest, ok := strings.CutPrefix(uri, uriScheme); ok {
		server, _, _ := strings.Cut(rest, "/")
		return conv.TraceURI(uriScheme + server)
	}
	return conv.TraceURI(uri)
}

// traceMeta is the trace context a client put in the _meta of a request's
// params (traceparent, tracestate, baggage), for the requests the gateway
// answers without go-sdk; nil without one.
func traceMeta(params json.RawMessage) mcp.Meta {
	if !bytes.Contains(params, []byte("traceparent")) {
		return nil // the common request costs no decode
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return nil
	}
	return traceMembers(p.Meta)
}

// traceMembers keeps the trace-context members of a decoded _meta.
func traceMembers(m map[string]json.RawMessage) mcp.Meta {
	var meta mcp.Meta
	for _, k := range []string{"traceparent", "tracestate", "baggage"} {
		var s string
		if raw, ok := m[k]; ok && json.Unmarshal(raw, &s) == nil {
			if meta == nil {
				meta = mcp.Meta{}
			}
			meta[k] = s
		}
	}
	return meta
}
