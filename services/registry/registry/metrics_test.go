package registry_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// cacheCounts reads mcpbus.registry.cache.requests by registry and result.
func cacheCounts(t *testing.T, r *sdkmetric.ManualReader) map[[2]string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "mcpbus.registry.cache.requests" {
				continue
			}
			for _, dp := range sum.DataPoints {
				reg, _ := dp.Attributes.Value("registry")
				res, _ := dp.Attributes.Value("result")
				out[[2]string{reg.AsString(), res.AsString()}] += dp.Value
			}
		}
	}
	return out
}

// TestCacheMetrics: a first search misses the cache of each registry, the
// same search again hits it as many times, and asks no registry.
func TestCacheMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetMeterProvider(mp) // before the service makes its instruments
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	e := start(t, setup{})

	e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	first := cacheCounts(t, reader)
	for _, reg := range []string{model.RegistryOfficial, model.RegistrySmithery} {
		if first[[2]string{reg, "miss"}] < 1 || first[[2]string{reg, "hit"}] != 0 {
			t.Errorf("%s after the first search: %v, want misses and no hit", reg, first)
		}
	}
	timed := testkit.Metrics(t, reader)
	for _, reg := range []string{model.RegistryOfficial, model.RegistrySmithery} {
		if n := timed["mcpbus.registry.request.duration|registry="+reg]; n != first[[2]string{reg, "miss"}] {
			t.Errorf("%s: %d timed requests, want one per miss (%v)", reg, n, first)
		}
	}
	e.search(t, model.RegistrySearchRequest{Query: "airtable"})
	second := cacheCounts(t, reader)
	for _, reg := range []string{model.RegistryOfficial, model.RegistrySmithery} {
		miss, hit := [2]string{reg, "miss"}, [2]string{reg, "hit"}
		if second[miss] != first[miss] || second[hit] != first[miss] {
			t.Errorf("%s after the same search again: %v, want as many hits as the first had misses (%v)", reg, second, first)
		}
	}
}
