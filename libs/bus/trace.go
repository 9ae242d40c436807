package bus

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts nats.Header to OpenTelemetry's TextMapCarrier.
// nats.Header is case-sensitive and keeps keys as written, so Get falls back
// to a case-insensitive match: a "Traceparent" set by another client is found.
type HeaderCarrier nats.Header

// Get returns the first value of key, matched exactly or else case-insensitively.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set stores value under key exactly as given.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// propagator is W3C trace context plus baggage; it is stateless, so one value serves all.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// InjectTrace writes the span context of ctx into h (traceparent, tracestate).
func InjectTrace(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, HeaderCarrier(h))
}

// ExtractTrace returns ctx carrying the remote span context found in h.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	if c := HeaderCarrier(h); c.Get("traceparent") == "" && c.Get("baggage") == "" {
		return ctx // the common untraced call costs two lookups
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// MapCarrier adapts a plain map (an MCP request's _meta) to TextMapCarrier.
type MapCarrier map[string]any

// Get returns the string at key.
func (m MapCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

// Set stores value at key.
func (m MapCarrier) Set(key, value string) { m[key] = value }

// Keys lists the keys present.
func (m MapCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// InjectTraceMap writes the span context of ctx into m (used for MCP _meta).
func InjectTraceMap(ctx context.Context, m map[string]any) {
	propagator.Inject(ctx, MapCarrier(m))
}

// Propagator is the W3C trace-context and baggage propagator of every hop,
// set whether or not the process installed OpenTelemetry's global one.
func Propagator() propagation.TextMapPropagator { return propagator }
