package credential_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/credential"
)

// collected reads the service's metrics: counter and gauge values by
// "name|attr=value,…" and histogram counts by the same.
func collected(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[m.Name+"|"+dp.Attributes.Encoded(attribute.DefaultEncoder())] += dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out[m.Name+"|"+dp.Attributes.Encoded(attribute.DefaultEncoder())] = dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out[m.Name+"|"+dp.Attributes.Encoded(attribute.DefaultEncoder())] += int64(dp.Count)
				}
			}
		}
	}
	return out
}

func meterReader(t *testing.T) *sdkmetric.ManualReader {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(mp) // before the service makes its instruments
	t.Cleanup(func() { otel.SetMeterProvider(prev); _ = mp.Shutdown(context.Background()) })
	return reader
}

// Resolves are counted by via and outcome, backend operations timed by
// operation, and the backend is up after it answered.
func TestMetrics(t *testing.T) {
	reader := meterReader(t)
	e := newEnv(t)
	ctx := ctxT(t)
	id := uuid.NewString()
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"A": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	res, err := credclient.NewResolver(e.nc, "", credclient.AsRunner("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Resolve(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := res.ChatKey(ctx, "nokey"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("chat key of a profile without one: %v", err)
	}
	got := collected(t, reader)
	for k, want := range map[string]int64{
		"mcpbus.credential.resolves|outcome=resolved,via=resolve":  1,
		"mcpbus.credential.resolves|outcome=NOT_FOUND,via=chatkey": 1,
		"mcpbus.credential.backend.up|backend=file":                1,
	} {
		if got[k] != want {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], want, got)
		}
	}
	for _, op := range []string{"get", "put"} {
		if got["mcpbus.credential.backend.duration|backend=file,operation="+op] == 0 {
			t.Errorf("no %s timed (all: %v)", op, got)
		}
	}
}

// downStore is a backend that cannot be reached.
type downStore struct{}

func (downStore) Get(context.Context, string) (model.Credentials, time.Time, error) {
	return model.Credentials{}, time.Time{}, apierr.New(apierr.ServiceUnavailable, "vault is sealed")
}
func (downStore) Put(context.Context, string, model.Credentials) error {
	return apierr.New(apierr.ServiceUnavailable, "vault is sealed")
}
func (downStore) Delete(context.Context, string) error {
	return apierr.New(apierr.ServiceUnavailable, "vault is sealed")
}
func (downStore) Name() string { return "vault" }

// A backend that does not answer is down, and its failures carry the code.
func TestMetricsBackendDown(t *testing.T) {
	reader := meterReader(t)
	e := newEnv(t, func(o *credential.Options) { o.Store = downStore{} })
	ctx := ctxT(t)
	_, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: uuid.NewString()})
	if apierr.Of(err) != apierr.ServiceUnavailable {
		t.Fatalf("describe on a sealed backend: %v", err)
	}
	got := collected(t, reader)
	if got["mcpbus.credential.backend.up|backend=vault"] != 0 || got["mcpbus.credential.backend.duration|backend=vault,error.type=SERVICE_UNAVAILABLE,operation=get"] == 0 {
		t.Fatalf("a sealed backend: %v", got)
	}
	if _, ok := got["mcpbus.credential.backend.up|backend=vault"]; !ok {
		t.Fatalf("no backend.up reported: %v", got)
	}
}
