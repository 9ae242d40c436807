package gateway

import (
	"net/http"
	"net/textproto"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// traceHTTP makes each request an HTTP SERVER span continuing the caller's
// traceparent. The span is named by its method until the route is known
// (namedRoute); the HTTP metrics are recorded elsewhere, so otelhttp's own
// are off.
//
// With no tracer provider installed (telemetry.Setup installs one only when
// export is on) and no trace context in the request, otelhttp's span would
// be a no-op one and its wrapping ~40 allocations per request for nothing:
// such a request goes straight to h. One that carries a traceparent (or
// baggage) still goes through otelhttp, so its context reaches the bus.
func traceHTTP(h http.Handler) http.Handler {
	prop := bus.Propagator()
	traced := otelhttp.NewHandler(h, "http",
		otelhttp.WithPropagators(prop),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
	)
	var fields []string // canonical, so the lookup allocates nothing
	for _, f := range prop.Fields() {
		fields = append(fields, textproto.CanonicalMIMEHeaderKey(f))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bus.TracingOff() && !carriesAny(r.Header, fields) {
			h.ServeHTTP(w, r)
			return
		}
		traced.ServeHTTP(w, r)
	})
}

func carriesAny(h http.Header, keys []string) bool {
	for _, k := range keys {
		if len(h[k]) > 0 {
			return true
		}
	}
	return false
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

// clientAddress sets the HTTP span's client.address to the client the
// gateway believes (auth.ClientAddr: the peer, or what a --trusted-proxy
// says): otelhttp takes X-Forwarded-For from anyone, so a client could
// name any address in the trace an operator reads. It runs inside the
// proxies' middleware.
func clientAddress(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetAttributes(semconv.ClientAddress(auth.ClientAddr(r)))
		}
		h.ServeHTTP(w, r)
	})
}
