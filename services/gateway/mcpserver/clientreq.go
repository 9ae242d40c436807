//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package mcpserver

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
)

// asksClient reports whether the MCP client of ss declared that it answers
// servers' requests (elicitation or sampling): its calls then go through
// go-sdk, never through the fast path's single JSON response: a stateful
// session's can send those requests on the call's stream, a 2026-07-28
// client's (capabilities from the request's _meta) are held (mrtr.go).
func asksClient(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil {
		return false
	}
	return ip.Capabilities.Elicitation != nil || ip.Capabilities.Sampling != nil
}

// clientRequests relays the requests a server makes during a call to the
// MCP client of ss, when it declared the capability: the runner sends them
// to the gateway's inbox, and they go out on the call's own stream (the
// request's context routes them there). Nil when the client answers none.
func clientRequests(ss *mcp.ServerSession) func(context.Context, model.ClientRequest) (any, error) {
	if !asksClient(ss) {
		return nil
	}
	caps := ss.InitializeParams().Capabilities
	return func(ctx context.Context, req model.ClientRequest) (any, error) {
		in, err := inputRequest(caps, req)
		if err != nil {
			return nil, err
		}
		switch p := in.(type) {
		case *mcp.ElicitParams:
			// A person answers: the call's time limit stops meanwhile
			// (libs/client pauses it), and inputWait bounds the wait instead.
			ctx, cancel := context.WithTimeout(ctx, inputWait)
			defer cancel()
			return ss.Elicit(ctx, p)
		case *mcp.CreateMessageWithToolsParams:
			return ss.CreateMessageWithTools(ctx, p)
		}
		return nil, apierr.Newf(apierr.Internal, "unexpected input request %T", in)
	}
}

// inputWait bounds the wait for a session client's person to answer a
// server's request for input, as the runner's --input-timeout does by
// default; the call's own timeout stops meanwhile. A 2026-07-28 client
// answers within the call's time (mrtr.go): a client that never retries
// cannot be told from a person still reading.
const inputWait = model.DefaultInputTimeout

// inputRequest decodes a relayed request into the MCP params of its method,
// if the client declared the capability it needs: *mcp.ElicitParams or
// *mcp.CreateMessageWithToolsParams.
func inputRequest(caps *mcp.ClientCapabilities, req model.ClientRequest) (mcp.InputRequest, error) {
	switch {
	case req.Method == model.MethodElicit && caps.Elicitation != nil:
		var p mcp.ElicitParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, apierr.Invalid("params", "elicitation params: "+err.Error())
		}
		// go-sdk checks the client's answer against the schema: one whose
		// refs loop would recurse until the gateway's stack overflows (the
		// runner refuses such a request already).
		if p.RequestedSchema != nil {
			raw, err := json.Marshal(p.RequestedSchema)
			if err == nil {
				err = schemaguard.CheckForm(raw)
			}
			if err != nil {
				return nil, apierr.Invalid("params", "elicitation params: "+err.Error())
			}
		}
		return &p, nil
	case req.Method == model.MethodCreateMessage && caps.Sampling != nil:
		var p mcp.CreateMessageWithToolsParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, apierr.Invalid("params", "sampling params: "+err.Error())
		}
		return &p, nil
	}
	return nil, apierr.Newf(apierr.Validation, "the MCP client did not declare the capability %s needs", req.Method)
}

// answersMethod reports whether r is an answer to a request of method.
func answersMethod(method string, r mcp.InputResponse) bool {
	switch r.(type) {
	case *mcp.ElicitResult:
		return method == model.MethodElicit
	case *mcp.CreateMessageWithToolsResult, *mcp.CreateMessageResult:
		return method == model.MethodCreateMessage
	}
	return false
}
