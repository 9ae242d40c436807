package auth

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ServiceName is the micro service of the gateway (keys endpoints, discovery).
const ServiceName = "mcpbus-gateway"

// Version of the gateway's bus API.
const Version = "0.1.0"

// AddKeysService registers the micro service mcpbus-gateway with
// mcp.v1.keys.{create,list,revoke} for the CLI. Gateway instances share one
// queue group (any of them may answer: the keys live in the shared bucket).
// Stop the returned service when done.
func AddKeysService(nc *nats.Conn, store *KeyStore, prefix string, log *slog.Logger) (micro.Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	subj := bus.NewSubjects(prefix)
	handlers := map[string]bus.HandlerFunc{
		"create": func(ctx context.Context, req micro.Request) (any, error) {
			var in model.KeyCreateRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			out, err := store.Create(ctx, in)
			if err == nil {
				log.Info("API key created", "key_id", out.ID, "name", out.Name, "scopes", out.Scopes)
			}
			return out, err
		},
		"list": func(ctx context.Context, req micro.Request) (any, error) {
			var in model.KeyListRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			keys, err := store.List(ctx, in.IncludeRevoked)
			return model.KeyListReply{Keys: keys}, err
		},
		"revoke": func(ctx context.Context, req micro.Request) (any, error) {
			var in model.KeyRevokeRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			if in.ID == "" {
				return nil, apierr.Invalid("id", "id is required")
			}
			out, err := store.Revoke(ctx, in.ID)
			if err == nil {
				log.Info("API key revoked", "key_id", out.ID, "name", out.Name)
			}
			return out, err
		},
	}
	cfg := bus.ServiceConfig{Name: ServiceName, Version: Version, Description: "mcpbus gateway: API keys of the HTTP edge"}
	for _, verb := range []string{"create", "list", "revoke"} {
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: "keys-" + verb,
			Subject: subj.Service("keys", verb), Handler: bus.JSONHandler(log, handlers[verb])})
	}
	return bus.StartService(nc, cfg)
}
