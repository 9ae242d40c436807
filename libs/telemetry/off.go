package telemetry

import (
	"reflect"

	"go.opentelemetry.io/otel"
)

// defaultProvider is the type of the global tracer provider before anyone
// sets one (otel's internal delegate), nil if it cannot be told apart. libs/bus
// has the same check (bus.TracingOff); it cannot import this package, which
// brings the OTLP exporters.
var defaultProvider = func() reflect.Type {
	t := reflect.TypeOf(otel.GetTracerProvider())
	if t == nil || t.String() != "*global.tracerProvider" {
		return nil
	}
	return t
}()

// tracingOff reports whether no tracer provider has been installed (Setup
// installs one only when export is on): every span started now is a no-op.
func tracingOff() bool {
	return defaultProvider != nil && reflect.TypeOf(otel.GetTracerProvider()) == defaultProvider
}
