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
	events := make(chan *nats.Msg, 8)
	sub, err := c.nc.ChanSubscribe(c.subj.EventsOf("oauth"), events)
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
		limit := time.NewTimer(time.Until(out.ExpiresAt) + OAuthWaitSlack)
		defer limit.Stop()
		for {
			select {
			case m := <-events:
				var ev model.OAuthEvent
				if json.Unmarshal(m.Data, &ev) != nil || ev.Server != out.Server || ev.Principal != principal {
					continue
				}
				if ev.Type == model.OAuthAuthorized {
					return nil
				}
				return apierr.New(apierr.Code(ev.Code), ev.Message)
			case <-limit.C:
				return apierr.New(apierr.Network, model.MsgAuthorizeTimeout)
			case <-ctx.Done():
				return apierr.Wrap(apierr.Network, "cancelled while waiting for the authorization", ctx.Err())
			}
		}
	}
	return out, wait, nil
}
