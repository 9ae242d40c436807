package telemetry_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpbus/mcpbus/libs/telemetry"
)

// TestSetupMetrics: instruments of the global meter — one made before the
// provider was installed included — reach the Prometheus handler with
// Prometheus names, duration histograms get the seconds buckets, and the
// resource names the service.
func TestSetupMetrics(t *testing.T) {
	early, err := otel.Meter("test/early").Int64Counter("mcpbus.test.early", metric.WithUnit("{thing}"))
	if err != nil {
		t.Fatal(err)
	}
	h, shutdown, err := telemetry.SetupMetrics("mcpbus-test", "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()

	m := otel.Meter("test/late")
	calls, _ := m.Int64Counter("mcpbus.test.calls", metric.WithUnit("{call}"))
	dur, _ := m.Float64Histogram("mcpbus.test.duration", metric.WithUnit("s"))
	ctx := context.Background()
	early.Add(ctx, 2)
	calls.Add(ctx, 1, metric.WithAttributes(attribute.String("mcpbus.server", "echo")))
	dur.Record(ctx, 0.0003)
	dur.Record(ctx, 42)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`mcpbus_test_early_total{`,
		`mcpbus_test_calls_total{mcpbus_server="echo"`,
		`mcpbus_test_duration_seconds_bucket{`,
		`le="0.0005"} 1`,
		`le="60"} 2`,
		`mcpbus_test_duration_seconds_count{`,
		`service_name="mcpbus-test"`,
		`service_version="1.2.3"`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, `le="750"`) {
		t.Errorf("the SDK's default buckets (0 … 10000) were used, not seconds:\n%s", text)
	}
}
