package client

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/model"
)

// answerClientRequests subscribes an inbox for the server's requests during
// the call, names it in the request (Mcp-Client-Subject) and answers each
// with fn on a goroutine of its own, so a slow answer (a person typing) does
// not hold up the next. stop unsubscribes once the call is over.
func (c *Client) answerClientRequests(ctx context.Context, msg *nats.Msg, fn func(context.Context, model.ClientRequest) (any, error)) (stop func(), err error) {
	// An inbox of its own, not one under the request mux's wildcard: a
	// message delivered to two subscriptions of one connection uses up the
	// server's one-response allowance (allow_responses) before the answer.
	inbox := c.nc.NewInbox()
	ctx, cancel := context.WithCancel(ctx)
	sub, err := c.nc.Subscribe(inbox, func(m *nats.Msg) {
		if !bus.InboxMsg(nil, m) {
			return
		}
		go func() {
			// The answer is the consumer of the runner's relay (its send
			// span): the trace goes on past the runner to the caller.
			sctx, span := bus.ProcessMsgSpan(ctx, m)
			var err error
			defer func() { bus.EndProcess(span, err) }()
			var req model.ClientRequest
			if err = json.Unmarshal(m.Data, &req); err != nil || req.Method == "" {
				err = apierr.Invalid("method", "not a client request")
				_ = m.RespondMsg(bus.ErrorMsg(err))
				return
			}
			if req.Method == model.MethodElicit {
				// A person answers: the call's limit (libs/deadline) stops
				// meanwhile, as the runner's does.
				defer deadline.Pause(ctx)()
			}
			var res any
			res, err = fn(sctx, req)
			if err == nil {
				var data []byte
				if data, err = json.Marshal(res); err == nil {
					_ = m.Respond(data)
					return
				}
			}
			_ = m.RespondMsg(bus.ErrorMsg(err))
		}()
	})
	if err != nil {
		cancel()
		return nil, apierr.Wrap(apierr.Network, "subscribing for the server's requests", err)
	}
	msg.Header.Set(bus.HeaderClientSubject, inbox)
	return func() {
		_ = sub.Unsubscribe()
		cancel()
	}, nil
}
