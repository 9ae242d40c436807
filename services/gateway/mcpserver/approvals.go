package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Approvals of tool calls (libs/approvals) on /mcp. A call the
// rules ask about is put to the calling client when it declared it can
// answer: a stateful session (2025-11-25) gets elicitation/create on the
// call's stream while the call is held; a client of 2026-07-28 gets a multi
// round-trip input_required result with the same form, its requestState
// naming the held call ("approval.<id>"), and its retry carries the answer.
// That requestState needs no seal: the id is derived from the caller, the
// tool and the arguments' hash, so a retry is checked against the KV record
// by recomputing it (a changed argument or another caller names another
// call), and any gateway instance — one started since, too — can take it.
// Any other client waits, held, for an approver (CLI, REST, console) or the
// timeout.

// approvalStatePrefix starts the requestState of an approval round.
const approvalStatePrefix = "approval."

// approvalInput is the input request id of the approval form.
const approvalInput = "mcpbus-approval"

// approve applies the approval rules to a tools/call; done says it answered
// the call itself (refused, or an input_required round), else the call goes
// on. A retry of an approval round that is approved has its requestState
// and inputResponses cleared, so the call goes on as a first round.
func (a *Aggregator) approve(ctx context.Context, v *view, e *toolEntry, req *mcp.CallToolRequest, args json.RawMessage) (res *mcp.CallToolResult, done bool, err error) {
	st := a.opts.Approvals
	if st == nil {
		return nil, false, nil
	}
	call := approvals.Call{Principal: v.principal.Bus().ID, Server: e.cat.Server, Tool: e.name, ServerTool: e.cat.Tool, Arguments: args}
	// The call goes to the runner within this request (an approval round's
	// retry included): an approval left for it is consumed when it ends.
	ctx = approvals.Sweeping(ctx)
	modern := modernEra(req)
	if modern && retrying(req) {
		id, ok := strings.CutPrefix(req.Params.RequestState, approvalStatePrefix)
		if !ok {
			return nil, false, nil // a held call's round (mrtr.go)
		}
		return a.resumeApproval(ctx, call, id, req)
	}
	verdict := st.Check(call.Principal, call.Names()...)
	switch verdict.Decision {
	case model.ApprovalAllow:
		return nil, false, nil
	case model.ApprovalDeny:
		return refused(approvals.DenyRuleMessage(call.Tool)), true, nil
	}
	if modern && elicits(req.Session) {
		h, err := st.Hold(ctx, call, verdict.Rule)
		if err != nil {
			return nil, true, approvalError(err)
		}
		if h.State(time.Now()) != model.HeldPending {
			return a.settle(ctx, h)
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{approvalInput: approvals.PromptParams(h)},
			RequestState: approvalStatePrefix + h.ID}, true, nil
	}
	var ask approvals.Asker
	if !modern && elicits(req.Session) {
		ss := req.Session
		ask = func(ctx context.Context, h model.HeldCall) (bool, error) {
			r, err := ss.Elicit(ctx, approvals.PromptParams(h))
			return approvals.Approves(r), err
		}
	}
	msg, err := st.Enforce(ctx, call, ask)
	if err != nil {
		return nil, true, approvalError(err)
	}
	if msg != "" {
		return refused(msg), true, nil
	}
	return nil, false, nil
}

// resumeApproval takes the retry of an approval round: the arguments must
// be the held call's, the answer decides it as the caller's own.
func (a *Aggregator) resumeApproval(ctx context.Context, call approvals.Call, id string, req *mcp.CallToolRequest) (*mcp.CallToolResult, bool, error) {
	st := a.opts.Approvals
	_, hash, err := model.CanonicalArgs(call.Arguments)
	if err != nil {
		return nil, true, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("arguments", err.Error()))
	}
	if approvals.HeldID(call.Principal, call.Tool, hash) != id {
		return refused(fmt.Sprintf("the arguments (or the caller, or the tool) differ from those of held call %s: a changed argument needs a new approval; call %s again without requestState", id, call.Tool)), true, nil
	}
	h, err := st.Get(ctx, id)
	if apierr.Of(err) == apierr.NotFound {
		return refused(fmt.Sprintf("held call %s is over (decided and used, or expired): call %s again without requestState", id, call.Tool)), true, nil
	}
	if err != nil {
		return nil, true, approvalError(err)
	}
	if r, ok := req.Params.InputResponses[approvalInput].(*mcp.ElicitResult); ok && h.State(time.Now()) == model.HeldPending {
		d := model.ApprovalDecideRequest{ID: id, Decision: model.DecisionDeny, Reason: "declined by the calling client"}
		if approvals.Approves(r) {
			d.Decision, d.Reason = model.DecisionApprove, "approved by the calling client"
		}
		// CONFLICT: an approver decided first; that decision stands.
		if _, err := st.Decide(ctx, d, call.Principal, false, true); err != nil && apierr.Of(err) != apierr.Conflict {
			return nil, true, approvalError(err)
		}
	}
	req.Params.RequestState, req.Params.InputResponses = "", nil
	if h, err = st.Get(ctx, id); err != nil {
		return nil, true, approvalError(err)
	}
	if h.State(time.Now()) == model.HeldPending {
		// No answer in the retry: wait for an approver like any client.
		if h, err = st.Await(ctx, h); err != nil {
			return nil, true, approvalError(err)
		}
		return settled(h)
	}
	return a.settle(ctx, h)
}

// settle consumes a decided held call: refused, or the call goes on.
func (a *Aggregator) settle(ctx context.Context, h model.HeldCall) (*mcp.CallToolResult, bool, error) {
	h, err := a.opts.Approvals.Take(ctx, h)
	if err != nil {
		return nil, true, approvalError(err)
	}
	return settled(h)
}

func settled(h model.HeldCall) (*mcp.CallToolResult, bool, error) {
	if msg := approvals.Refusal(h); msg != "" {
		return refused(msg), true, nil
	}
	return nil, false, nil
}

// elicits reports whether the client of ss declared elicitation.
func elicits(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil
}

// refused is the isError result of a call the approvals refused.
func refused(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// approvalError is the answer when the approvals cannot be read or written:
// the call is refused (fail closed).
func approvalError(err error) *jsonrpc.Error {
	ae := apierr.From(err)
	if ae.Code == apierr.Internal {
		ae = apierr.Wrap(apierr.ServiceUnavailable, "the approvals of tool calls are unavailable", err)
	}
	return rpcError(jsonrpc.CodeInternalError, ae)
}
