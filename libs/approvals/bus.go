package approvals

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Enforcing reports whether the rules can hold or refuse anything: without
// rules (and with the default allow) a caller skips everything else, so the
// bus path pays one atomic load for approvals it does not use.
func (s *Store) Enforcing() bool {
	r := s.rules.Load()
	return len(r.Rules) > 0 || (r.Default != "" && r.Default != model.ApprovalAllow)
}

// Gate applies the rules to a call that reached the bus (the runner's call
// path): nil lets it run. A deny is UNAUTHORIZED. An ask holds the call —
// the same record a front door writes, so a call the gateway or the chat
// held and got approved finds its approved record here and is not held
// again — and waits at most wait for the decision: approved lets it run
// (consuming the approval: it releases this one call), denied or expired is
// UNAUTHORIZED, and a call still pending when wait runs out is UNAUTHORIZED
// naming the held call, whose record stays for the caller's retry with the
// same arguments. Nothing the message says about itself counts: the record
// is found by the caller's principal, the tool and the arguments' hash.
func (s *Store) Gate(ctx context.Context, c Call, wait time.Duration) error {
	v := s.Check(c.Principal, c.Names()...)
	switch v.Decision {
	case model.ApprovalAllow:
		return nil
	case model.ApprovalAsk:
	default:
		return refusal(DenyRuleMessage(c.Tool))
	}
	h, err := s.Hold(ctx, c, v.Rule)
	if err != nil {
		return unavailable(err)
	}
	if h.State(s.now()) == model.HeldPending {
		wctx, cancel := context.WithTimeout(ctx, max(wait, 0))
		h, err = s.Await(wctx, h)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			return PendingError(h)
		}
	} else {
		h, err = s.Take(ctx, h)
	}
	if err != nil {
		return unavailable(err)
	}
	if msg := Refusal(h); msg != "" {
		return refusal(msg)
	}
	return nil
}

// FieldApproval is the field of the errors Gate answers.
const FieldApproval = "approval"

// PendingError is the answer to a bus call whose deadline ended while it
// was held: the caller retries the same call once a person approved it.
func PendingError(h model.HeldCall) *apierr.Error {
	return apierr.Newf(apierr.Unauthorized, "the call of %s is held for approval as %s and was not decided within the caller's deadline; "+
		"call again with the same arguments once it is approved (mcpbus approvals approve %s); nobody deciding by %s denies it",
		h.Tool, h.ID, h.ID, h.ExpiresAt.UTC().Format(time.RFC3339)).WithField(FieldApproval)
}

func refusal(msg string) *apierr.Error {
	return apierr.New(apierr.Unauthorized, msg).WithField(FieldApproval)
}

// unavailable refuses a call whose approval cannot be read or written (fail
// closed); a contract error (arguments that are not JSON) stays as it is.
func unavailable(err error) error {
	if e := apierr.From(err); e.Code != apierr.Internal {
		return e
	}
	return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("the approvals of tool calls are unavailable: %v", err), err)
}
