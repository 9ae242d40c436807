package rest

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// cancelTurns cancels the running chat turns of key keyID. A turn goes on
// in the chat service after the request that sent its message has ended,
// calling tools in the sender's name step after step: without this, a
// revoked key's turn would keep doing so (as a task would, cancelTasks).
// The chat service knows no keys, so the gateway asks, as the key, for
// each of the key's conversations: a conversation with no turn running
// is left as it is. Every gateway instance is told of a revocation and
// does it: a second cancel changes nothing.
func (a *API) cancelTurns(keyID string) {
	as := principal.With(context.Background(), principal.Key(keyID, false, model.ToolFilter{}))
	ctx, cancel := context.WithTimeout(as, revokedTasksWait)
	convs, err := a.client.ChatList(ctx)
	cancel()
	if errors.Is(err, nats.ErrNoResponders) {
		return // no chat service: no turn runs
	}
	if err != nil {
		a.log.Warn("listing the conversations of a revoked key failed: their turns may go on", "key_id", keyID, "err", err)
		return
	}
	for _, c := range convs {
		// Each on its own deadline: a cancel waits for its turn to end,
		// and one slow turn must not leave the next running.
		ctx, cancel := context.WithTimeout(as, revokedTurnWait)
		_, err := a.client.ChatCancel(ctx, model.ChatCancelRequest{Conversation: c.Conversation})
		cancel()
		if err != nil && apierr.Of(err) != apierr.NotFound {
			a.log.Warn("cancelling a chat turn of a revoked key failed", "key_id", keyID, "conversation", c.Conversation, "err", err)
		}
	}
}

// revokedTurnWait bounds the cancel of one turn of a revoked key (the
// cancellation is recorded at once; this is the wait for the turn's end).
const revokedTurnWait = 10 * time.Second

// heldBy names the gateway as who denied a revoked key's held calls.
const heldBy = "gateway"

// denyHeld denies the calls key keyID has held for approval: an approver
// deciding later would otherwise release them, and the request waiting on
// one (/mcp/invoke, POST /api/v1/tasks, /mcp) would run its call, or make
// its task, in the revoked key's name. Each request is refused as a denied
// call is. Every gateway instance does it: the second finds them decided.
func (a *API) denyHeld(keyID string) {
	if a.opts.Approvals == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), revokedTasksWait)
	defer cancel()
	who := principal.Key(keyID, false, model.ToolFilter{}).ID
	n, err := a.opts.Approvals.DenyCallsOf(ctx, who, heldBy, "the API key that made it was revoked")
	if err != nil {
		a.log.Warn("denying the held calls of a revoked key failed: an approver may still release them", "key_id", keyID, "err", err)
	}
	if n > 0 {
		a.log.Info("held calls of a revoked key denied", "key_id", keyID, "calls", n)
	}
}

// DropSubject denies the calls held for approval of OAuth subject sub, of
// issuer iss (empty: of every issuer), whose access tokens were revoked
// (jwtauth.Revocations.OnStored): as for a revoked key (denyHeld), an
// approver deciding later would otherwise release a call made with a
// revoked token. A revocation of one token (by jti) leaves the subject's
// calls: its other tokens still act for it.
func (a *API) DropSubject(iss, sub string) {
	if a.opts.Approvals == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), revokedTasksWait)
	defer cancel()
	n, err := a.opts.Approvals.DenyCallsMatching(ctx, approvals.OAuthSubjectOf(iss, sub), heldBy, "the OAuth access tokens that made it were revoked")
	if err != nil {
		a.log.Warn("denying the held calls of a revoked OAuth subject failed: an approver may still release them", "sub", sub, "iss", iss, "err", err)
	}
	if n > 0 {
		a.log.Info("held calls of a revoked OAuth subject denied", "sub", sub, "iss", iss, "calls", n)
	}
}
