package httpmetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/mcpbus/mcpbus/services/gateway/internal/httpmetrics"
)

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func key(set attribute.Set) string {
	var s string
	for _, kv := range set.ToSlice() {
		s += string(kv.Key) + "=" + kv.Value.String() + " "
	}
	return s
}

// TestMiddleware: each request is one observation of
// http.server.request.duration under its route pattern (never the raw
// path), normalized method and final status; refusals count by reason; a
// flush reaches the writer beneath.
func TestMiddleware(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m := httpmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		http.NewResponseController(w).Flush()
	})
	mux.HandleFunc("GET /api/v1/servers/{slug}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) })
	// As the gateway: middleware inside may refuse before the mux is reached.
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Refuse") != "" {
			m.RateLimited(r)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		mux.ServeHTTP(w, r)
	})
	h := m.Middleware(mux, inner)

	for _, c := range []struct {
		method, path string
		refuse       bool
	}{
		{"POST", "/mcp", false},
		{"POST", "/mcp", false},
		{"GET", "/api/v1/servers/alpha", false},
		{"GET", "/api/v1/servers/beta", false},
		{"GET", "/api/v1/servers/gamma", true},
		{"GET", "/nosuch/path", false},
		{"BREW", "/mcp", false},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.refuse {
			req.Header.Set("X-Refuse", "1")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if c.method == "POST" && !rec.Flushed {
			t.Errorf("%s %s: the flush did not reach the writer beneath", c.method, c.path)
		}
	}
	m.AuthThrottled(httptest.NewRequest("GET", "/mcp", nil))

	data := collect(t, reader)
	hist, ok := data["http.server.request.duration"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("no http.server.request.duration histogram: %+v", data)
	}
	got := map[string]uint64{}
	for _, dp := range hist.DataPoints {
		got[key(dp.Attributes)] += dp.Count
	}
	want := map[string]uint64{
		"http.request.method=POST http.response.status_code=202 http.route=/mcp url.scheme=http ":                  2,
		"http.request.method=GET http.response.status_code=200 http.route=/api/v1/servers/{slug} url.scheme=http ": 2,
		"http.request.method=GET http.response.status_code=429 http.route=/api/v1/servers/{slug} url.scheme=http ": 1,
		"http.request.method=GET http.response.status_code=404 url.scheme=http ":                                   1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d observations, want %d (all: %v)", k, got[k], n, got)
		}
	}
	other := 0
	for k, n := range got {
		if _, ok := want[k]; !ok {
			if !strings.Contains(k, "http.request.method=_OTHER") || !strings.Contains(k, "http.response.status_code=405") {
				t.Errorf("unexpected series %s (%d)", k, n)
			}
			other++
		}
	}
	if other != 1 {
		t.Errorf("BREW /mcp: %d series, want one with method _OTHER and status 405: %v", other, got)
	}
	for k := range got {
		if strings.Contains(k, "alpha") || strings.Contains(k, "nosuch") {
			t.Errorf("a raw path leaked into a label: %s", k)
		}
	}

	sum, ok := data["mcpbus.gateway.ratelimit.refusals"].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("no mcpbus.gateway.ratelimit.refusals counter: %+v", data)
	}
	refusals := map[string]int64{}
	for _, dp := range sum.DataPoints {
		refusals[key(dp.Attributes)] = dp.Value
	}
	if refusals["reason=rate_limit "] != 1 || refusals["reason=auth_throttle "] != 1 || len(refusals) != 2 {
		t.Errorf("refusals: %v, want one rate_limit and one auth_throttle", refusals)
	}
}

// TestRoute: the route is the pattern's path, host and method dropped.
func TestRoute(t *testing.T) {
	mux := http.NewServeMux()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux.Handle("GET /healthz", h)
	mux.Handle("example.com/static/", h)
	mux.Handle("DELETE /api/v1/keys/{id}", h)
	for path, want := range map[string]string{
		"http://x/healthz":              "/healthz",
		"http://example.com/static/a/b": "/static/",
		"http://x/api/v1/keys/k1":       "",
		"http://x/nothing":              "",
	} {
		if got := httpmetrics.Route(mux, httptest.NewRequest("GET", path, nil)); got != want {
			t.Errorf("GET %s: route %q, want %q", path, got, want)
		}
	}
	if got := httpmetrics.Route(mux, httptest.NewRequest("DELETE", "http://x/api/v1/keys/k1", nil)); got != "/api/v1/keys/{id}" {
		t.Errorf("DELETE /api/v1/keys/k1: route %q", got)
	}
}

// The middleware's own cost per request stays a couple of allocations: the
// attribute set of a sample is made once per distinct label set.
func TestMiddlewareAllocations(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m := httpmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mcp", func(http.ResponseWriter, *http.Request) {})
	h := m.Middleware(mux, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	req := httptest.NewRequest("POST", "/mcp", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req) // the first request of a label set makes it
	if n := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) }); n > 2 {
		t.Errorf("%.0f allocations a request, want ≤ 2", n)
	}
}
