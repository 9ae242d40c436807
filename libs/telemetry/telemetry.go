// Package telemetry sets up OpenTelemetry for a service: traces exported over
// OTLP (gRPC or HTTP) when the standard OTEL_* variables ask for it, nothing
// otherwise, so the default costs no more than a no-op tracer; and log records
// that carry the trace and span of their context.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Enabled reports whether the environment asks for trace export: an OTLP
// endpoint is set, and neither OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none
// turns it off.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Protocol is the OTLP protocol the environment chooses for traces: "grpc" or
// "http/protobuf" (the specification's default).
func Protocol() string {
	p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if p == "" {
		return "http/protobuf"
	}
	return p
}

// Setup installs the global tracer provider and W3C propagator for service
// and returns the function that flushes and stops it. The OTLP exporter reads
// its endpoint, headers, TLS and timeout from the standard OTEL_* variables;
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the resource.
func Setup(ctx context.Context, service, version string) (func(context.Context) error, error) {
	return setup(ctx, service, version, true)
}

// SetupCommand is Setup for a short-lived command (the CLI): a failed export
// is not retried. The exporter's retries wait seconds between tries (up to a
// minute), time a command about to exit does not have: with the collector
// down, its flush at exit would last as long as the caller's bound allows
// instead of failing at once.
func SetupCommand(ctx context.Context, service, version string) (func(context.Context) error, error) {
	return setup(ctx, service, version, false)
}

func setup(ctx context.Context, service, version string, retry bool) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch p := Protocol(); p {
	case "grpc":
		var opts []otlptracegrpc.Option
		if !retry {
			opts = append(opts, otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case "http/protobuf":
		var opts []otlptracehttp.Option
		if !retry {
			opts = append(opts, otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL=%q: use grpc or http/protobuf", p)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
	}
	res, err := Resource(ctx, service, version)
	if err != nil {
		return nil, err
	}
	tp := newProvider(sdktrace.WithBatcher(exp), res)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// DefaultAttributeValueLength bounds each string attribute value of a span
// (in characters) unless OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT or
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT says otherwise (-1: no bound). The SDK's
// own default is no bound, and several values come from clients, some
// before any authentication: otelhttp records the User-Agent and Host
// headers (64 KiB each) and the path; an MCP request brings a resource URI
// or JSON-RPC id of up to a request body. Each span waits in the export
// queue (2048 spans) until sent: unbounded, any client could grow the
// process by gigabytes; at 1024 characters (4 KiB of UTF-8 at most) the
// HTTP span's four such values hold the queue under 32 MiB. Recorded tool
// content (the operator's opt-in) is cut there too unless the limit is
// raised.
const DefaultAttributeValueLength = 1024

// SpanLimits are the SDK's limits from the environment (OTEL_SPAN_*,
// OTEL_ATTRIBUTE_*), with string values bounded by
// DefaultAttributeValueLength when the environment sets no length.
func SpanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	if os.Getenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT") == "" && os.Getenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") == "" {
		l.AttributeValueLengthLimit = DefaultAttributeValueLength
	}
	return l
}

// newProvider is the tracer provider Setup installs: spans go to export,
// bounded by SpanLimits, sampled by OTEL_TRACES_SAMPLER when it is set and
// else by DefaultSampler.
func newProvider(export sdktrace.TracerProviderOption, res *resource.Resource) *sdktrace.TracerProvider {
	opts := []sdktrace.TracerProviderOption{export, sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(SpanLimits())}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		opts = append(opts, sdktrace.WithSampler(DefaultSampler()))
	}
	return sdktrace.NewTracerProvider(opts...)
}

// DefaultSampler records every span, whatever a caller's traceparent says
// of sampling: the SDK's default (parentbased_always_on) drops every span
// under a remote parent whose sampled flag is 0, so any client could keep
// its calls out of the operator's traces by sending one. A caller's trace
// id and parent are still honoured. OTEL_TRACES_SAMPLER replaces it
// (parentbased_always_on to follow callers' flags).
func DefaultSampler() sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.AlwaysSample(), sdktrace.WithRemoteParentNotSampled(sdktrace.AlwaysSample()))
}

// maxStatusLen bounds a span's status description: the SDK bounds
// attributes, not it, and an error's message may quote what a client sent.
const maxStatusLen = 1024

// StatusText is msg bounded for a span's status description: at most
// maxStatusLen bytes, cut at a character boundary, "…" marking the cut.
func StatusText(msg string) string {
	if len(msg) <= maxStatusLen {
		return msg
	}
	cut := maxStatusLen - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// Resource describes this process: the SDK's defaults, service.name and
// service.version, then whatever OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES say.
func Resource(ctx context.Context, service, version string) (*resource.Resource, error) {
	own := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service), semconv.ServiceVersion(version))
	env, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	res, err := resource.Merge(resource.Default(), own)
	if err == nil {
		res, err = resource.Merge(res, env)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}
