// Package httpmetrics records the gateway's HTTP metrics: the OpenTelemetry
// http.server.request.duration histogram by route pattern (never the raw
// path), method and status, and the requests refused by its rate limits.
// It makes no spans: tracing is the bus's and the MCP server's.
package httpmetrics

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MeterName is the instrumentation scope of the gateway's HTTP metrics.
const MeterName = "github.com/mcpbus/mcpbus/services/gateway/internal/httpmetrics"

// Reasons of mcpbus.gateway.ratelimit.refusals.
const (
	// ReasonRateLimit: the caller's key (or address, without auth) is over its rate.
	ReasonRateLimit = "rate_limit"
	// ReasonAuthThrottle: the address failed authentication too often.
	ReasonAuthThrottle = "auth_throttle"
)

// Metrics are the instruments of one gateway.
type Metrics struct {
	duration metric.Float64Histogram
	refusals metric.Int64Counter
	reasons  map[string]metric.AddOption
	// sets holds the attribute set of each (method, status, scheme, route)
	// seen: building one costs ~5 allocations a request. The values are few
	// (methods are normalized, routes are the mux's patterns).
	sets sync.Map // labels → metric.RecordOption
}

// labels are the attributes of one http.server.request.duration sample.
type labels struct {
	method string
	status int
	scheme string
	route  string
}

// option is the record option of l, made once.
func (m *Metrics) option(l labels) metric.RecordOption {
	if o, ok := m.sets.Load(l); ok {
		return o.(metric.RecordOption)
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs,
		attribute.String("http.request.method", l.method),
		attribute.Int("http.response.status_code", l.status),
		attribute.String("url.scheme", l.scheme))
	if l.route != "" {
		attrs = append(attrs, attribute.String("http.route", l.route))
	}
	o, _ := m.sets.LoadOrStore(l, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return o.(metric.RecordOption)
}

// New makes the instruments from mp (the gateway passes the global provider).
func New(mp metric.MeterProvider) *Metrics {
	m := mp.Meter(MeterName)
	// Errors only come with invalid names; the no-op instrument stands in.
	duration, _ := m.Float64Histogram("http.server.request.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests (for /mcp GET and the event stream: as long as the stream stays open)"))
	refusals, _ := m.Int64Counter("mcpbus.gateway.ratelimit.refusals",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests the gateway refused with 429, by reason: rate_limit (the key's rate) or auth_throttle (too many failed authentications from the address)"))
	reasons := map[string]metric.AddOption{}
	for _, r := range []string{ReasonRateLimit, ReasonAuthThrottle} {
		reasons[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
	}
	return &Metrics{duration: duration, refusals: refusals, reasons: reasons}
}

// RateLimited counts a request refused for its key's rate.
func (m *Metrics) RateLimited(r *http.Request) { m.refused(r.Context(), ReasonRateLimit) }

// AuthThrottled counts a request refused because its address failed
// authentication too often.
func (m *Metrics) AuthThrottled(r *http.Request) { m.refused(r.Context(), ReasonAuthThrottle) }

func (m *Metrics) refused(ctx context.Context, reason string) {
	m.refusals.Add(ctx, 1, m.reasons[reason])
}

// Middleware records http.server.request.duration for every request next
// answers. The route is the pattern mux matches the request with, less its
// method ("POST /mcp" gives /mcp; "/api/v1/servers/{slug}" stays a
// template); a request no route matches has none. Put it outermost, so
// refusals of the middleware inside it (401, 403, 429, 413) are measured too.
func (m *Metrics) Middleware(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		route := Route(mux, r)
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			// Recorded even when a handler panics with http.ErrAbortHandler.
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			m.duration.Record(r.Context(), time.Since(start).Seconds(),
				m.option(labels{method: method(r.Method), status: status, scheme: scheme(r), route: route}))
		}()
		next.ServeHTTP(sw, r)
	})
}

// Route is the path template of the mux pattern r matches ("" when none).
func Route(mux *http.ServeMux, r *http.Request) string {
	_, pattern := mux.Handler(r)
	// A pattern is [METHOD ][HOST]/[PATH]: the route is the path part.
	if _, rest, ok := strings.Cut(pattern, " "); ok {
		pattern = strings.TrimLeft(rest, " \t")
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:]
	}
	return pattern
}

// method is the request method, or _OTHER for one HTTP does not define (the
// convention that keeps the label's values few).
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// statusWriter records the status of a response. Unwrap lets
// http.ResponseController reach Flush and the deadlines beneath.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 { // 1xx are informational: the final status comes later
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush passes a flush on to the writer beneath (streams of /mcp and the events).
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
