package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// With no tracer provider installed (as in these tests), a request without
// trace context skips otelhttp; one with a traceparent still has its
// context continued, so it reaches the bus.
func TestTraceHTTPSkipsOnlyUntracedRequests(t *testing.T) {
	if !bus.TracingOff() {
		t.Fatal("a tracer provider is installed in this test process: the case under test is absent")
	}
	var gotW http.ResponseWriter
	var gotSC trace.SpanContext
	h := traceHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotW, gotSC = w, trace.SpanContextFromContext(r.Context())
	}))

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/mcp", nil))
	if gotW != w {
		t.Errorf("an untraced request was wrapped (%T): otelhttp ran for nothing", gotW)
	}
	if gotSC.IsValid() {
		t.Errorf("an untraced request got span context %v", gotSC)
	}

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if gotSC.TraceID().String() != traceID {
		t.Errorf("the caller's trace was not continued: trace id %v, want %s", gotSC.TraceID(), traceID)
	}
	if gotW == w {
		t.Error("a traced request skipped otelhttp")
	}
}
