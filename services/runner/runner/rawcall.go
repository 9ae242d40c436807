package runner

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// rawCalls switches the raw tools/call path on. Off, every call goes through
// go-sdk's ClientSession.CallTool, as before.
const rawCalls = true

// sdkOnly turns the raw path off at run time, for the tests and benchmarks
// that compare both paths in one process (export_test.go).
var sdkOnly atomic.Bool

// sep2575Version is the first protocol version whose requests must carry the
// _meta triple (protocol version, client info and capabilities).
const sep2575Version = "2026-07-28"

// useRaw reports whether a call of tool goes through the session's raw
// connection (launch.RawConn: the child's stdio pipes, or one POST on the
// Streamable HTTP session): the result is passed on as the server wrote it,
// never decoded and encoded again. go-sdk keeps the calls that need its
// session: progress (its notifications are routed by go-sdk; every task's
// call, whose progress is recorded), recorded tool
// content (the span gets the decoded content), and, over HTTP under protocol
// 2026-07-28, tools whose arguments go in headers (x-mcp-header), which
// go-sdk sets (see docs/design.md §8).
func (s *server) useRaw(sess liveSession, tool *mcp.Tool, progress bool) bool {
	if !rawCalls || sdkOnly.Load() || sess.raw == nil || progress || s.r.telemetry.content {
		return false
	}
	if ir := sess.InitializeResult(); ir != nil && ir.ProtocolVersion >= sep2575Version {
		// Under SEP-2575 a raw call copies the triple from go-sdk's requests;
		// the start's tools/list always sent one, so this holds but for a
		// server whose tools were never listed, which has nothing to call anyway.
		if !sess.raw.HasRequestMeta() {
			return false
		}
		if _, http := sess.raw.(*launch.HTTPConn); http && s.schemas.bindsHeaders(tool) {
			return false
		}
	}
	return true
}

// errUseSession says a raw call must be made again through go-sdk: its
// result asked for the client's input (go-sdk fulfils it), or the HTTP
// session is gone on the server (go-sdk learns it and reports it as before).
var errUseSession = errors.New("the call goes through go-sdk's session")

// callRaw is call's tail on the raw path: the same span, timeout,
// cancellation and error mapping as go-sdk's path, the result as bytes.
func (s *server) callRaw(ctx context.Context, sess liveSession, cfg *model.McpConfig, tool string, args []byte, timeout time.Duration) (callReply, string, error) {
	ctx, op := s.startOp(ctx, sess.ClientSession, cfg, "tools/call", tool, conv.GenAIToolName.String(tool), conv.OperationExecuteTool)
	res, id, err := sess.raw.CallTool(ctx, tool, args, traceMeta(ctx))
	if (err == nil && launch.InputRequired(res)) || errors.Is(err, launch.ErrUseSession) {
		op.End(ctx, "", nil)
		return callReply{}, tool, errUseSession
	}
	if span := op.Span(); id != 0 && span.IsRecording() {
		// tracedConn does this for go-sdk's requests.
		span.SetAttributes(conv.JSONRPCRequestID.String(id.String()))
	}
	if e := refusedCredentials(err); e != nil {
		// An HTTP upstream or its token endpoint refused the credentials, as in call.
		s.post(func() { s.credentialsRefused(sess.ClientSession, e) })
		op.End(ctx, errType(e), e)
		return callReply{}, tool, e
	}
	isError, content := false, false
	if err == nil {
		isError, content, err = launch.CheckToolResult(res)
	}
	if err != nil {
		err = s.scrubError(callError(ctx, s.slug, tool, timeout, err), sess.secrets.redactor())
		op.End(ctx, errType(err), err)
		return callReply{}, tool, err
	}
	outcome := ""
	if isError {
		outcome = conv.ToolError
	}
	op.End(ctx, outcome, nil)
	s.lastPing.Store(time.Now().UnixNano()) // an answered call is proof of life
	return callReply{data: launch.KeepResultMembers(res), isError: isError, checked: content}, tool, nil
}

// traceMeta renders the trace context of ctx (traceparent, tracestate,
// baggage) as JSON members for the request's _meta, as injectMeta does for
// go-sdk's path; nil without a valid span context.
func traceMeta(ctx context.Context) []byte {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := &metaCarrier{}
	bus.Propagator().Inject(ctx, c)
	return c.b
}

// metaCarrier is a propagation.TextMapCarrier writing JSON members.
type metaCarrier struct{ b []byte }

func (c *metaCarrier) Get(string) string { return "" }
func (c *metaCarrier) Keys() []string    { return nil }
func (c *metaCarrier) Set(key, value string) {
	if len(c.b) > 0 {
		c.b = append(c.b, ',')
	}
	c.b = launch.AppendMetaMember(c.b, key, value)
}
