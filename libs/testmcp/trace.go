package testmcp

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// Traced makes s an instrumented MCP server: each tools/call is a SERVER
// span "tools/call {tool}" that continues the trace the client put in the
// request's _meta, as the MCP semantic conventions ask.
func Traced(s *mcp.Server) {
	tracer := otel.Tracer("github.com/mcpbus/mcpbus/libs/testmcp")
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
			if method != "tools/call" || !ok || p == nil {
				return next(ctx, method, req)
			}
			ctx = bus.Propagator().Extract(ctx, bus.MapCarrier(p.Meta))
			ctx, span := tracer.Start(ctx, conv.MCPSpanName(method, p.Name), trace.WithSpanKind(trace.SpanKindServer))
			span.SetAttributes(conv.MCPMethodName.String(method), conv.GenAIToolName.String(p.Name), conv.OperationExecuteTool)
			defer span.End()
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); err != nil || (ok && r.IsError) {
				span.SetAttributes(conv.ErrorType.String(conv.ToolError))
			}
			return res, err
		}
	})
}
