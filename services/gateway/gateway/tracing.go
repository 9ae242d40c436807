package gateway

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// traceHTTP makes each request an HTTP SERVER span continuing the caller's
// traceparent. The span is named by its method until the route is known
// (namedRoute); the HTTP metrics are recorded elsewhere, so otelhttp's own
// are off.
func traceHTTP(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithPropagators(bus.Propagator()),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
	)
}

// namedRoute names the request's span "{method} {route}" with http.route:
// the pattern, never the raw path (which may hold a server's name or a key id).
func namedRoute(method, pattern string, h http.Handler) http.Handler {
	name := method + " " + pattern
	route := semconv.HTTPRoute(pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetName(name)
			span.SetAttributes(route)
		}
		h.ServeHTTP(w, r)
	})
}
