package client

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// OAuthWaitSlack is how long after a flow's expiry a waiter still listens
// for its outcome (the gateway publishes the timeout itself).
const OAuthWaitSlack = 15 * time.Second

// errWaitLimit ends an OAuth wait that ran past its flow's expiry and
// OAuthWaitSlack.
var errWaitLimit = errors.New("the authorization's wait ran out")

// AuthorizeServer starts the OAuth authorization of a remote server
// (mcp.v1.oauth.start, served by the gateway) and returns the URL to open
// with a function that waits for the outcome (events.oauth.<server>): nil
// once authorized, else the flow's error ("Authorization timed out after 2
// minutes.", …). The wait gives up OAuthWaitSlack after the flow's expiry
// or when ctx ends. The subscription is made before the start, so no
// outcome is missed; wait must be called (it releases it).
func (c *Client) AuthorizeServer(ctx context.Context, server string) (model.OAuthStartReply, func(context.Context) error, error) {
	return c.AuthorizeServerFor(ctx, server, "")
}

// AuthorizeServerFor is AuthorizeServer for principal's own authorization
// of a server with auth.per_principal ("" is the server's own).
func (c *Client) AuthorizeServerFor(ctx context.Context, server, principal string) (model.OAuthStartReply, func(context.Context) error, error) {
	// Every server's events (the slug is known once the start answers),
	// queued in the subscription's pending list (nats.go's default limits,
	// 512Ki messages) until wait reads them: a channel of a few messages,
	// which nats.go drops past, lost this flow's outcome behind a burst of
	// other flows' while the start was under way or before wait was called,
	// and the wait ran to its limit.
	sub, err := c.nc.SubscribeSync(c.subj.EventsOf("oauth"))
	if err != nil {
		return model.OAuthStartReply{}, nil, apierr.Wrap(apierr.ServiceUnavailable, "subscribing to the OAuth events", err)
	}
	var out model.OAuthStartReply
	if err := bus.RequestJSON(ctx, c.nc, c.subj.Service("oauth", "start"), model.OAuthStartRequest{Server: server, Principal: principal}, &out, 30*time.Second); err != nil {
		_ = sub.Unsubscribe()
		if errors.Is(err, nats.ErrNoResponders) {
			return out, nil, apierr.Wrap(apierr.ServiceUnavailable, "no gateway answers mcp.v1.oauth.start (the OAuth callback is served by the gateway: run mcpbus up with --http-addr)", err)
		}
		return out, nil, err
	}
	wait := func(ctx context.Context) error {
		defer func() { _ = sub.Unsubscribe() }()
		wctx, cancel := context.WithTimeoutCause(ctx, time.Until(out.ExpiresAt)+OAuthWaitSlack, errWaitLimit)
		defer cancel()
		for {
			m, err := sub.NextMsgWithContext(wctx)
			switch {
			case err == nil:
			case errors.Is(err, nats.ErrSlowConsumer):
				continue // reported once; what is still queued is read on
			case errors.Is(context.Cause(wctx), errWaitLimit):
				return apierr.New(apierr.Network, model.MsgAuthorizeTimeout)
			case ctx.Err() != nil:
				return apierr.Wrap(apierr.Network, "cancelled while waiting for the authorization", ctx.Err())
			default:
				return apierr.Wrap(apierr.ServiceUnavailable, "waiting for the outcome of the authorization", err)
			}
			var ev model.OAuthEvent
			if json.Unmarshal(m.Data, &ev) != nil || ev.Server != out.Server || ev.Principal != principal {
				continue
			}
			if ev.Type == model.OAuthAuthorized {
				return nil
			}
			return apierr.New(apierr.Code(ev.Code), ev.Message)
		}
	}
	return out, wait, nil
}
