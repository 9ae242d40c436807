package testkit

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// MeterReader installs a meter provider read by hand as the global one
// (before the code under test makes its instruments) until the test ends.
func MeterReader(t testing.TB) *sdkmetric.ManualReader {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(mp)
	t.Cleanup(func() { otel.SetMeterProvider(prev); _ = mp.Shutdown(context.Background()) })
	return reader
}

// Metrics collects r into "name|attr=value,…" (attributes sorted): the sum
// of a counter, the last value of a gauge, the count of a histogram.
func Metrics(t testing.TB, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	key := func(name string, attrs attribute.Set) string {
		return name + "|" + attrs.Encoded(attribute.DefaultEncoder())
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] += dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] = dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] += int64(dp.Count)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] += int64(dp.Count)
				}
			}
		}
	}
	return out
}
