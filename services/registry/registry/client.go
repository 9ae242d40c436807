package registry

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// RequestTimeout suits a search: both sources, each bounded by the service's
// source timeout (5s by default), answer in parallel.
const RequestTimeout = 15 * time.Second

// Search asks the registry service on <prefix>.registry.search ("" prefix:
// mcp.v1). Errors are *apierr.Error (SERVICE_UNAVAILABLE when no registry
// service runs).
func Search(ctx context.Context, nc *nats.Conn, prefix string, req model.RegistrySearchRequest) (*model.RegistrySearchReply, error) {
	var out model.RegistrySearchReply
	if err := bus.RequestJSON(ctx, nc, bus.NewSubjects(prefix).Service("registry", "search"), req, &out, RequestTimeout); err != nil {
		return nil, err
	}
	return &out, nil
}

// Get asks the registry service on <prefix>.registry.get for an install plan.
func Get(ctx context.Context, nc *nats.Conn, prefix string, req model.RegistryGetRequest) (*model.InstallPlan, error) {
	var out model.InstallPlan
	if err := bus.RequestJSON(ctx, nc, bus.NewSubjects(prefix).Service("registry", "get"), req, &out, RequestTimeout); err != nil {
		return nil, err
	}
	return &out, nil
}
