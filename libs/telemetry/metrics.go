package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// DurationBuckets are the histogram bucket bounds, in seconds, of every
// duration histogram (unit "s"): from half a millisecond (a bus round trip)
// to a minute (a slow tool call or a server start).
var DurationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// SetupMetrics installs, as the global meter provider, an OpenTelemetry
// MeterProvider that the returned handler exposes in the Prometheus text
// format (with the Go runtime and process metrics), so every otel.Meter(…)
// of the process — instruments made before it included — reports there. It
// uses a registry of its own, never Prometheus's global one. Shutdown stops
// the provider; the handler then answers with what remains (the runtime
// metrics).
//
// Metric names follow the exporter's Prometheus translation: dots become
// underscores, the unit is a suffix (_seconds) and counters end in _total.
func SetupMetrics(service, version string) (http.Handler, func(context.Context) error, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	); err != nil {
		return nil, nil, fmt.Errorf("telemetry: runtime metrics: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	res, err := Resource(context.Background(), service, version)
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exp),
		sdkmetric.WithResource(res),
		sdkmetric.WithView(durationView),
	)
	otel.SetMeterProvider(mp)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, MaxRequestsInFlight: 4})
	return h, mp.Shutdown, nil
}

// durationView gives every histogram in seconds the DurationBuckets.
func durationView(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
	if i.Kind != sdkmetric.InstrumentKindHistogram || i.Unit != "s" {
		return sdkmetric.Stream{}, false
	}
	return sdkmetric.Stream{Name: i.Name, Description: i.Description, Unit: i.Unit,
		Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: DurationBuckets}}, true
}
