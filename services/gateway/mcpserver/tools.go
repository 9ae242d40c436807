package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/lostreplies"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
	"github.com/mcpbus/mcpbus/libs/toolargs"
	"github.com/mcpbus/mcpbus/services/gateway/internal/restarts"
)

// toolHandler routes a tools/call of e, on the server of view v, over the
// bus: arguments checked against the input schema first (a bad call never
// leaves the gateway), the caller's trace context carried on, progress
// relayed back to the session, and the call cancelled at the runner when the
// client cancels. The server's own requests go to a stateful session on its
// stream (clientreq.go), to a client of 2026-07-28 as multi round-trip
// results (mrtr.go).
func (a *Aggregator) toolHandler(v *view, e *toolEntry) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, bad, mismatch := checkArguments(e, req.Params.Arguments)
		if bad != nil {
			return nil, rpcError(jsonrpc.CodeInvalidParams, bad)
		}
		if mismatch != nil {
			return mismatchResult(mismatch), nil
		}
		if res, done, err := a.approve(ctx, v, e, req, args); done {
			return res, err
		}
		if retrying(req) && modernEra(req) {
			return a.resumeCall(ctx, v, e, req)
		}
		if res := a.restartResult(e); res != nil {
			return res, nil
		}
		if modernAsks(req) {
			return a.holdCall(ctx, v, e, req, args)
		}
		// The time the client's person takes on a server's request for
		// input does not count (libs/client pauses it).
		ctx, cancel := deadline.WithTimeout(ctx, a.opts.CallTimeout)
		defer cancel()
		opts := &client.CallOptions{}
		if token := req.Params.GetProgressToken(); token != nil {
			opts.OnProgress = func(ev model.ProgressEvent) {
				// The request's context routes the notification to its stream.
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: token, Progress: ev.Progress, Total: ev.Total, Message: ev.Message,
				})
			}
		}
		opts.OnClientRequest = clientRequests(req.Session) // elicitation, sampling
		raw, err := a.client.Call(e.vouch(ctx), e.cat.Server, e.cat.Tool, args, opts)
		if res := a.unservedResult(e, err); res != nil {
			return res, nil
		}
		if res, perr, ok := a.authorizationPrompt(ctx, req.Session.InitializeParams().Capabilities, req.Session, e, err); ok {
			return res, perr
		}
		if err != nil {
			return nil, a.callError(ctx, e, err)
		}
		return a.callResult(e, raw)
	}
}

// callResult decodes the runner's result of a call of e for go-sdk, which
// adds what protocol 2026-07-28 wants of a result; the upstream server's own
// protocol fields are not the client's.
func (a *Aggregator) callResult(e *toolEntry, raw json.RawMessage) (*mcp.CallToolResult, error) {
	raw, err := eraResult(linkedURIs(raw, e.cat.Server), nil)
	if err != nil {
		a.log.Warn("tool result is not a CallToolResult", "tool", e.name, "error", err)
		return nil, rpcError(jsonrpc.CodeInternalError, apierr.Newf(apierr.Internal, "tool %s returned a result that is not a CallToolResult", e.name))
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		a.log.Warn("tool result is not a CallToolResult", "tool", e.name, "error", err)
		return nil, rpcError(jsonrpc.CodeInternalError, apierr.Newf(apierr.Internal, "tool %s returned a result that is not a CallToolResult", e.name))
	}
	return &res, nil
}

// checkArguments returns the arguments to send (an object, {} when absent),
// or why they cannot be sent: bad when they are not a JSON object at all (a
// malformed request, -32602), mismatch when they fail the tool's input
// schema (a tool error the model can correct, SEP-1303).
func checkArguments(e *toolEntry, raw json.RawMessage) (args json.RawMessage, bad, mismatch *apierr.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = json.RawMessage("{}")
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, apierr.Invalid("arguments", "arguments are not valid JSON"), nil
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, apierr.Invalid("arguments", "arguments must be a JSON object"), nil
	}
	if s := e.resolved(); s != nil {
		// Arguments too costly to check are the server's to check, as
		// those of a schema the gateway cannot compile are.
		if err := s.Validate(v); err != nil && !errors.Is(err, schemaguard.ErrCostly) {
			return nil, nil, toolargs.Mismatch(e.name, err)
		}
	}
	return raw, nil, nil
}

// outageResult is the answer to a call of a listed tool whose server no
// runner serves (a failover under way): a tool error saying it is
// temporarily unavailable and when to retry, which the model reads, rather
// than a JSON-RPC error (-32602 would claim the tool does not exist, and
// clients surface other JSON-RPC errors as failures of the connection).
func outageResult(e *toolEntry) *mcp.CallToolResult {
	return toolError(restarts.Unavailable(e.name, e.cat.Server).Message)
}

// unservedResult is the tool error of a call its server could not take:
// no runner serves it (outageResult), or the runner said it restarts after
// a crash, which this gateway has seen by now too (restartResult's answer,
// in the runner's words: the call got there first). Nil for any other
// outcome.
func (a *Aggregator) unservedResult(e *toolEntry, err error) *mcp.CallToolResult {
	if restarts.NoOwner(err) {
		return outageResult(e)
	}
	if errors.Is(err, client.ErrRunnerGone) || errors.Is(err, lostreplies.ErrLost) {
		// Its runner died during the call (runnerwatch), or its reply was
		// lost in a drop (lostreplies): the model reads what happened.
		return toolError(apierr.From(err).Message)
	}
	if ae := apierr.From(err); err != nil && ae.Code == apierr.ServiceUnavailable && a.restartWait(e) != nil {
		return toolError(ae.Message)
	}
	return nil
}

// mismatchResult is the tool result of arguments that fail the input schema.
func mismatchResult(e *apierr.Error) *mcp.CallToolResult {
	return toolError(e.Message)
}

// callError maps a failed bus call to the MCP error of the spec.
func (a *Aggregator) callError(ctx context.Context, e *toolEntry, err error) *jsonrpc.Error {
	ae := apierr.From(err)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return rpcError(jsonrpc.CodeInternalError, apierr.Newf(apierr.Network, "tool %s did not answer within %s", e.name, a.opts.CallTimeout))
	case ae.Code == apierr.NotFound:
		// The server or tool went away since the list: an unknown tool.
		return rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.NotFound, "unknown tool %q: %s", e.name, ae.Message).WithField("name"))
	case ae.Code == apierr.Validation:
		return rpcError(jsonrpc.CodeInvalidParams, ae)
	}
	if ctx.Err() == nil {
		a.log.Warn("tool call failed", "tool", e.name, "code", ae.Code, "error", ae.Message)
	}
	return rpcError(jsonrpc.CodeInternalError, ae)
}

// rpcError is a JSON-RPC error whose data is the contract's error body.
func rpcError(code int64, e *apierr.Error) *jsonrpc.Error {
	return &jsonrpc.Error{Code: code, Message: e.Message, Data: e.JSON()}
}
