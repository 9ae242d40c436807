package auth

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/gateway/internal/gwaudit"
)

// ServiceName is the micro service of the gateway (keys endpoints, discovery).
const ServiceName = "mcpbus-gateway"

// Version of the gateway's bus API.
const Version = "0.1.0"

// KeyAdmin is the one definition of the key operations that both the bus
// (mcp.v1.keys.*, the CLI) and the REST API (/api/v1/keys, the console)
// serve: the same checks, the same store and the same audit line, whichever
// edge asks. by names the requester in the audit line ("bus", "key <id>").
type KeyAdmin struct {
	Store *KeyStore
	Log   *slog.Logger
	// Audit records keys made and revoked (nil: not recorded).
	Audit *gwaudit.Recorder
}

func (k KeyAdmin) log() *slog.Logger {
	if k.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return k.Log
}

// Create makes a key; the reply holds its secret, the only time it is shown.
func (k KeyAdmin) Create(ctx context.Context, in model.KeyCreateRequest, by string) (model.KeyCreateReply, error) {
	out, err := k.Store.Create(ctx, in)
	if err == nil {
		k.log().Info("API key created", "key_id", out.ID, "name", out.Name, "scopes", out.Scopes, "by", by)
		k.Audit.Record(model.GatewayAuditEvent{Action: model.GatewayKeyCreated, Principal: principal.Actor(ctx), KeyID: out.ID, KeyName: out.Name, Scopes: out.Scopes})
	}
	return out, err
}

// List describes the keys (never a secret or a hash).
func (k KeyAdmin) List(ctx context.Context, in model.KeyListRequest) (model.KeyListReply, error) {
	keys, err := k.Store.List(ctx, in.IncludeRevoked)
	return model.KeyListReply{Keys: keys}, err
}

// Revoke revokes a key: this gateway refuses it from the moment Revoke
// returns (the store updates its cache on its own writes), the others as
// soon as their watch of the bucket delivers the change.
func (k KeyAdmin) Revoke(ctx context.Context, in model.KeyRevokeRequest, by string) (model.APIKey, error) {
	if in.ID == "" {
		return model.APIKey{}, apierr.Invalid("id", "id is required")
	}
	out, err := k.Store.Revoke(ctx, in.ID)
	if err == nil {
		k.log().Info("API key revoked", "key_id", out.ID, "name", out.Name, "by", by)
		k.Audit.Record(model.GatewayAuditEvent{Action: model.GatewayKeyRevoked, Principal: principal.Actor(ctx), KeyID: out.ID, KeyName: out.Name, Scopes: out.Scopes})
	}
	return out, err
}

// AddKeysService registers the micro service mcpbus-gateway with
// mcp.v1.keys.{create,list,revoke} for the CLI. Gateway instances share one
// queue group (any of them may answer: the keys live in the shared bucket).
// Stop the returned service when done.
func AddKeysService(nc *nats.Conn, store *KeyStore, prefix string, log *slog.Logger, rec *gwaudit.Recorder) (micro.Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	keys := KeyAdmin{Store: store, Log: log, Audit: rec}
	subj := bus.NewSubjects(prefix)
	handlers := map[string]bus.HandlerFunc{
		"create": func(ctx context.Context, req micro.Request) (any, error) {
			ctx, cancel := callerBound(ctx, req)
			defer cancel()
			var in model.KeyCreateRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			return keys.Create(ctx, in, "bus")
		},
		"list": func(ctx context.Context, req micro.Request) (any, error) {
			ctx, cancel := callerBound(ctx, req)
			defer cancel()
			var in model.KeyListRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			return keys.List(ctx, in)
		},
		"revoke": func(ctx context.Context, req micro.Request) (any, error) {
			ctx, cancel := callerBound(ctx, req)
			defer cancel()
			var in model.KeyRevokeRequest
			if err := bus.Decode(req.Data(), &in); err != nil {
				return nil, err
			}
			return keys.Revoke(ctx, in, "bus")
		},
	}
	cfg := bus.ServiceConfig{Name: ServiceName, Version: Version, Description: "mcpbus gateway: API keys of the HTTP edge"}
	for _, verb := range []string{"create", "list", "revoke"} {
		cfg.Endpoints = append(cfg.Endpoints, bus.Endpoint{Name: "keys-" + verb,
			Subject: subj.Service("keys", verb), Handler: bus.JSONHandler(log, handlers[verb])})
	}
	return bus.StartService(nc, cfg)
}

// callerBound ends ctx when the caller stops waiting (its Mcp-Timeout-Ms),
// so a write retried through a leader election gives up no later than that.
func callerBound(ctx context.Context, req micro.Request) (context.Context, context.CancelFunc) {
	if t := bus.CallerTimeout(nats.Header(req.Headers())); t > 0 {
		return context.WithTimeout(ctx, t)
	}
	return context.WithCancel(ctx)
}
