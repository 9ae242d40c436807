package mcpserver

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// Authorizer starts (or hands out again, while pending) a principal's own
// OAuth authorization of a server with auth.per_principal
// (oauthflow.Flows), calling done with its outcome.
type Authorizer interface {
	Prompt(ctx context.Context, server, principal string, done func(error)) (model.OAuthStartReply, error)
}

// SetAuthorizer lets calls refused for want of the caller's own credentials
// answer with an authorization URL (before the handler serves).
func (a *Aggregator) SetAuthorizer(z Authorizer) { a.authorizer = z }

// completeTimeout bounds telling a session its authorization completed.
const completeTimeout = 10 * time.Second

// authorizationPrompt answers a call of e that the runner refused because
// the caller has no credentials of their own for its per-principal server
// (model.NotAuthorized): it starts the caller's OAuth flow and offers the
// URL in the form the client declared — a URL-mode elicitation
// (URLElicitationRequired, -32042) to a client with the url elicitation
// capability, with notifications/elicitation/complete on its session when
// the flow ends; else a tool error whose text holds the URL, which the
// model or the user reads (a JSON-RPC error would look like a broken
// connection). ok is false for any other error. A server that does not ask
// for OAuth (static per-principal secrets) gets the refusal's own text,
// which says how to store them.
func (a *Aggregator) authorizationPrompt(ctx context.Context, caps *mcp.ClientCapabilities, ss *mcp.ServerSession, e *toolEntry, err error) (res *mcp.CallToolResult, rpcErr error, ok bool) {
	if !model.NotAuthorized(err) {
		return nil, nil, false
	}
	refusal := apierr.From(err).Message
	p := auth.PrincipalFrom(ctx)
	if p == nil || a.authorizer == nil {
		return toolError(refusal), nil, true
	}
	id := rand.Text()
	urlMode := caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
	var done func(error)
	if urlMode && ss != nil {
		done = func(ferr error) {
			if ferr != nil {
				return
			}
			nctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
			defer cancel()
			if nerr := ss.NotifyElicitationComplete(nctx, &mcp.ElicitationCompleteParams{ElicitationID: id}); nerr != nil {
				a.log.Debug("telling a session its authorization completed", "error", nerr)
			}
		}
	}
	out, serr := a.authorizer.Prompt(ctx, e.cat.Server, p.Bus().ID, done)
	if serr != nil {
		return toolError(refusal), nil, true
	}
	msg := fmt.Sprintf("Authorize %s as yourself: open %s (valid until %s UTC), then call %s again.",
		out.Server, out.AuthorizationURL, out.ExpiresAt.UTC().Format("15:04:05"), e.name)
	if urlMode {
		return nil, mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url", ElicitationID: id, URL: out.AuthorizationURL, Message: msg}}), true
	}
	return toolError(refusal + "\n" + msg), nil, true
}

// toolError is a tool result that reports text as the tool's error.
func toolError(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
