package registry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// meterName is the instrumentation scope of the registry service's metrics.
const meterName = "github.com/mcpbus/mcpbus/services/registry/registry"

// cacheMetrics count the lookups of the registry answer cache and time the
// requests to each registry, made once per service from the global meter
// provider.
type cacheMetrics struct {
	requests metric.Int64Counter
	fetches  metric.Float64Histogram
}

func newCacheMetrics() cacheMetrics {
	// Errors only come with invalid names; the no-op instrument stands in.
	m := otel.Meter(meterName)
	requests, _ := m.Int64Counter("mcpbus.registry.cache.requests",
		metric.WithUnit("{request}"),
		metric.WithDescription("Registry answers looked up in the cache, by registry (official, smithery) and result: hit (a fresh answer was used) or miss (the registry was asked)"))
	fetches, _ := m.Float64Histogram("mcpbus.registry.request.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Requests to a registry (official, smithery), by outcome: error.type is the contract code of a failure, absent on success"))
	return cacheMetrics{requests: requests, fetches: fetches}
}

// fetched records one request to registry, its duration and outcome.
func (m cacheMetrics) fetched(ctx context.Context, registry string, start time.Time, err error) {
	attrs := []attribute.KeyValue{attribute.String("registry", registry)}
	if err != nil {
		attrs = append(attrs, conv.ErrorType.String(string(apierr.Of(err))))
	}
	m.fetches.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attrs...))
}

// lookup records one cache lookup for registry.
func (m cacheMetrics) lookup(ctx context.Context, registry string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("registry", registry), attribute.String("result", result)))
}
