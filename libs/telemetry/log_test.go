package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcpbus/mcpbus/libs/telemetry"
)

// A record logged with a traced context names its trace and span; one logged
// without, or through a derived logger, stays as it was.
func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("service", "x")
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "op")
	defer span.End()

	log.InfoContext(ctx, "traced")
	log.Info("untraced")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var traced, untraced map[string]any
	if json.Unmarshal(lines[0], &traced) != nil || json.Unmarshal(lines[1], &untraced) != nil {
		t.Fatalf("not JSON: %s", buf.String())
	}
	sc := span.SpanContext()
	if traced["trace_id"] != sc.TraceID().String() || traced["span_id"] != sc.SpanID().String() || traced["service"] != "x" {
		t.Errorf("traced record: %v", traced)
	}
	if _, ok := untraced["trace_id"]; ok {
		t.Errorf("untraced record has a trace id: %v", untraced)
	}
}
