package registry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the registry service's metrics.
const meterName = "github.com/mcpbus/mcpbus/services/registry/registry"

// cacheMetrics count the lookups of the registry answer cache, made once
// per service from the global meter provider.
type cacheMetrics struct {
	requests metric.Int64Counter
}

func newCacheMetrics() cacheMetrics {
	// Errors only come with invalid names; the no-op instrument stands in.
	requests, _ := otel.Meter(meterName).Int64Counter("mcpbus.registry.cache.requests",
		metric.WithUnit("{request}"),
		metric.WithDescription("Registry answers looked up in the cache, by registry (official, smithery) and result: hit (a fresh answer was used) or miss (the registry was asked)"))
	return cacheMetrics{requests: requests}
}

// lookup records one cache lookup for registry.
func (m cacheMetrics) lookup(ctx context.Context, registry string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("registry", registry), attribute.String("result", result)))
}
