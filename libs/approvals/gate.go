package approvals

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
)

// Verdict is what the rules say of a call before any holding.
type Verdict struct {
	Decision string // model.ApprovalAllow, Ask or Deny
	Rule     *model.GatewayApprovalRule
}

// Check is the rules' decision for a call by principal id of the tool
// known by names (Call.Names: the name clients see first).
func (s *Store) Check(principal string, names ...string) Verdict {
	d, r := s.Rules().DecideNames(names, principal)
	return Verdict{Decision: d, Rule: r}
}

// Asker is the calling client's own prompt (elicitation on its session):
// whether its user approves h, or an error when it gave no answer.
type Asker func(ctx context.Context, h model.HeldCall) (approve bool, err error)

// Enforce applies the rules to c: "" when the call may go on, else the
// message of its refusal (for an isError result). A call the rules ask about
// is held until decided or expired; ask, if not nil, puts the question to
// the calling client meanwhile, and its answer decides as the caller's own.
// An error (the bucket unreachable) refuses the call too: fail closed.
func (s *Store) Enforce(ctx context.Context, c Call, ask Asker) (string, error) {
	v := s.Check(c.Principal, c.Names()...)
	switch v.Decision {
	case model.ApprovalAllow:
		return "", nil
	case model.ApprovalAsk:
	default:
		return DenyRuleMessage(c.Tool), nil
	}
	if !c.Deferred {
		ctx = Sweeping(ctx)
	}
	h, err := s.Hold(ctx, c, v.Rule)
	if err != nil {
		return "", err
	}
	if h.State(s.now()) != model.HeldPending {
		h, err = s.Take(ctx, h)
		if err != nil {
			return "", err
		}
		return Refusal(h), nil
	}
	if ask != nil {
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			ok, err := ask(actx, h)
			if err != nil || actx.Err() != nil {
				// No answer: the call waits for another approver.
				s.log.Debug("the calling client did not answer the approval prompt", "id", h.ID, "tool", h.Tool, "error", err)
				return
			}
			req := model.ApprovalDecideRequest{ID: h.ID, Decision: model.DecisionDeny, Reason: "declined by the calling client"}
			if ok {
				req.Decision, req.Reason = model.DecisionApprove, "approved by the calling client"
			}
			_, _ = s.Decide(actx, req, c.Principal, false, true)
		}()
	}
	h, err = s.Await(ctx, h)
	if err != nil {
		return "", err
	}
	return Refusal(h), nil
}

// Refusal is "" for an approved call, else why it was refused.
func Refusal(h model.HeldCall) string {
	if h.Decision == model.HeldApproved {
		return ""
	}
	msg := fmt.Sprintf("the call of %s was denied (held call %s)", h.Tool, h.ID)
	if h.DecidedBy != "" {
		msg += " by " + h.DecidedBy
	}
	if h.Reason != "" {
		msg += ": " + h.Reason
	}
	return msg
}

// DenyRuleMessage is the refusal of a call the rules deny outright. It
// names no enforcer: the gateway (Enforce) and the runners (Gate) apply the
// one set of rules, and either may be the one refusing.
func DenyRuleMessage(tool string) string {
	return fmt.Sprintf("the approval rules deny calls of %s", tool)
}

// PromptParams is the form put to a client that can answer: approve yes or no.
func PromptParams(h model.HeldCall) *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Mode: "form",
		Message: fmt.Sprintf("mcpbus holds a call of %s for approval (id %s, expires %s). Arguments: %s. Approve it?",
			h.Tool, h.ID, h.ExpiresAt.Format("15:04:05 MST"), truncate(string(h.Arguments), 1000)),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Approve this call", "default": false},
			},
			"required": []string{"approve"},
		},
	}
}

// Approves reports whether a client's answer to PromptParams approves.
func Approves(r *mcp.ElicitResult) bool {
	if r == nil || r.Action != "accept" {
		return false
	}
	ok, _ := r.Content["approve"].(bool)
	return ok
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
