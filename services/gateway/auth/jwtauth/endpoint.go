package jwtauth

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// AddRevokeEndpoint serves mcp.v1.tokens.revoke on svc (the gateway's micro
// service, so its queue group): `mcpbus tokens revoke`, the operator's.
func AddRevokeEndpoint(svc micro.Service, r *Revocations, prefix string, log *slog.Logger) error {
	// RefuseReply: the endpoint is added outside bus.StartService, which
	// refuses a reply that is not an inbox for its own endpoints.
	h := bus.RefuseReply(log, bus.JSONHandler(log, func(ctx context.Context, req micro.Request) (any, error) {
		var in model.TokenRevokeRequest
		if err := bus.Decode(req.Data(), &in); err != nil {
			return nil, err
		}
		return r.Revoke(ctx, in, "bus")
	}))
	if err := svc.AddEndpoint("tokens-revoke", h, micro.WithEndpointSubject(bus.NewSubjects(prefix).Service("tokens", "revoke"))); err != nil {
		return fmt.Errorf("gateway: tokens.revoke endpoint: %w", err)
	}
	return nil
}
