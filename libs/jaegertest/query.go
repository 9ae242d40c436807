package jaegertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// Trace is one trace as Jaeger's query API returns it.
type Trace struct {
	// TraceID is 32 lowercase hex digits, as go.opentelemetry.io/otel/trace.TraceID.String writes it.
	TraceID string
	// Spans are ordered by start time.
	Spans []Span
	// Warnings are Jaeger's remarks on the trace (e.g. a span whose parent it never received).
	Warnings []string
}

// Span is one span of a Trace.
type Span struct {
	// TraceID is 32 lowercase hex digits, SpanID and ParentSpanID 16.
	TraceID string
	SpanID  string
	// ParentSpanID is the span's parent (its CHILD_OF reference); "" for a root span.
	ParentSpanID string
	// Service is the service.name of the resource that exported the span.
	Service string
	// Name is the span name (Jaeger's operation name).
	Name string
	// Kind is the OpenTelemetry span kind in lower case: "server", "client", "producer",
	// "consumer" or "internal" ("" when the span has none). Jaeger keeps it in the span.kind tag.
	Kind string
	// Start and Duration are at microsecond precision.
	Start    time.Time
	Duration time.Duration
	// Attributes are the span's tags, but span.kind (see Kind): its OpenTelemetry attributes and
	// the tags Jaeger derives from the rest of the span, such as otel.status_code,
	// otel.status_description, error and otel.scope.name. A value is a string, bool, int64,
	// float64 or []byte; an OpenTelemetry slice or map attribute arrives as a JSON string.
	Attributes map[string]any
	// Resource holds the exporting resource's attributes, but service.name (see Service).
	Resource map[string]any
	// Events are the span's events (Jaeger's logs), in order.
	Events []Event
	// Warnings are Jaeger's remarks on the span.
	Warnings []string
}

// Event is a span event.
type Event struct {
	// Name is the event name (Jaeger keeps it in the "event" field).
	Name string
	Time time.Time
	// Attributes are the event's other fields, typed like Span.Attributes.
	Attributes map[string]any
}

// Find returns the first span (by start time) named name.
func (tr Trace) Find(name string) (Span, bool) {
	for _, s := range tr.Spans {
		if s.Name == name {
			return s, true
		}
	}
	return Span{}, false
}

// Parent returns the span's parent if the trace holds it.
func (tr Trace) Parent(s Span) (Span, bool) {
	if s.ParentSpanID == "" {
		return Span{}, false
	}
	for _, p := range tr.Spans {
		if p.SpanID == s.ParentSpanID {
			return p, true
		}
	}
	return Span{}, false
}

// String draws the trace as a tree, one span a line, for test failure messages.
func (tr Trace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s, %d spans", tr.TraceID, len(tr.Spans))
	children := map[string][]Span{}
	ids := map[string]bool{}
	for _, s := range tr.Spans {
		ids[s.SpanID] = true
	}
	var roots []Span
	for _, s := range tr.Spans {
		if s.ParentSpanID == "" || !ids[s.ParentSpanID] {
			roots = append(roots, s)
		} else {
			children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
		}
	}
	var draw func(s Span, depth int)
	draw = func(s Span, depth int) {
		fmt.Fprintf(&b, "\n%s%s %q kind=%s span=%s", strings.Repeat("  ", depth+1), s.Service, s.Name, s.Kind, s.SpanID)
		if s.ParentSpanID != "" && depth == 0 {
			fmt.Fprintf(&b, " parent=%s (missing)", s.ParentSpanID)
		}
		if len(s.Attributes) > 0 {
			keys := make([]string, 0, len(s.Attributes))
			for k := range s.Attributes {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, " %s=%v", k, s.Attributes[k])
			}
		}
		if depth < 64 { // a reference cycle cannot happen in Jaeger's output, but never loop
			for _, c := range children[s.SpanID] {
				draw(c, depth+1)
			}
		}
	}
	for _, r := range roots {
		draw(r, 0)
	}
	for _, w := range tr.Warnings {
		fmt.Fprintf(&b, "\n  warning: %s", w)
	}
	return b.String()
}

// ErrTraceNotFound is returned by Server.Trace for a trace Jaeger does not hold (yet).
var ErrTraceNotFound = errors.New("jaegertest: trace not found")

var httpClient = &http.Client{Timeout: 10 * time.Second}

// Services lists the service names Jaeger has received spans from (GET /api/services).
func (s *Server) Services(ctx context.Context) ([]string, error) {
	var names []string
	if err := s.get(ctx, "/api/services", &names); err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// Traces returns the traces holding spans of service, up to 1000 (GET
// /api/traces?service=...: Jaeger's v1 JSON API, the one its UI reads); none for a service Jaeger
// has not seen.
func (s *Server) Traces(ctx context.Context, service string) ([]Trace, error) {
	q := url.Values{"service": {service}, "limit": {"1000"}}
	var raw []jsonTrace
	if err := s.get(ctx, "/api/traces?"+q.Encode(), &raw); err != nil {
		return nil, err
	}
	out := make([]Trace, 0, len(raw))
	for _, r := range raw {
		tr, err := r.convert()
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	return out, nil
}

// Trace returns the trace with traceID (hex, as trace.TraceID.String writes it), or
// ErrTraceNotFound (GET /api/traces/{traceID}).
func (s *Server) Trace(ctx context.Context, traceID string) (Trace, error) {
	var raw []jsonTrace
	if err := s.get(ctx, "/api/traces/"+url.PathEscape(traceID), &raw); err != nil {
		return Trace{}, err
	}
	if len(raw) == 0 {
		return Trace{}, ErrTraceNotFound
	}
	return raw[0].convert()
}

// AwaitTrace polls the trace with traceID until want accepts it (a nil want accepts any), and
// returns it; or, once ctx ends, the last version seen (if any) with an error. Spans reach the
// query API a moment after their export returns, and each exporter sends its own.
func (s *Server) AwaitTrace(ctx context.Context, traceID string, want func(Trace) bool) (Trace, error) {
	var last Trace
	var lastErr error
	err := poll(ctx, func() bool {
		tr, err := s.Trace(ctx, traceID)
		if err != nil {
			if ctx.Err() == nil {
				lastErr = err
			}
			return false
		}
		last, lastErr = tr, nil
		return want == nil || want(tr)
	})
	if err == nil {
		return last, nil
	}
	if lastErr != nil {
		return last, fmt.Errorf("%w; last query: %w", err, lastErr)
	}
	return last, fmt.Errorf("%w; the trace never satisfied the condition, last seen: %s", err, last)
}

// WaitTrace is AwaitTrace bounded by WaitTimeout and the test's context: it returns the trace
// once want accepts it (a nil want accepts any) and fails the test, showing the last version
// seen, if that does not happen in time.
func (s *Server) WaitTrace(t testing.TB, traceID string, want func(Trace) bool) Trace {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), WaitTimeout)
	defer cancel()
	tr, err := s.AwaitTrace(ctx, traceID, want)
	if err != nil {
		t.Fatalf("jaegertest: trace %s: %v", traceID, err)
	}
	return tr
}

// WaitTraces polls the traces of service until want accepts them (a nil want accepts any
// non-empty list) and returns them; it fails the test if that does not happen within
// WaitTimeout. It suits a test that does not know the trace ID, e.g. one made by a service.
func (s *Server) WaitTraces(t testing.TB, service string, want func([]Trace) bool) []Trace {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), WaitTimeout)
	defer cancel()
	var last []Trace
	var lastErr error
	err := poll(ctx, func() bool {
		trs, err := s.Traces(ctx, service)
		if err != nil {
			if ctx.Err() == nil {
				lastErr = err
			}
			return false
		}
		last, lastErr = trs, nil
		if want == nil {
			return len(trs) > 0
		}
		return want(trs)
	})
	if err != nil {
		if lastErr != nil {
			t.Fatalf("jaegertest: traces of %q: %v; last query: %v", service, err, lastErr)
		}
		var b strings.Builder
		for _, tr := range last {
			b.WriteString("\n" + tr.String())
		}
		t.Fatalf("jaegertest: traces of %q: %v; never satisfied the condition, last seen %d:%s", service, err, len(last), b.String())
	}
	return last
}

// poll calls done every 100ms until it returns true, or ctx ends.
func poll(ctx context.Context, done func() bool) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if done() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// get reads one of the query API's JSON replies ({"data": ..., "errors": [...]}) into data.
// A 404 is ErrTraceNotFound.
func (s *Server) get(ctx context.Context, path string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.QueryURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("jaegertest: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("jaegertest: GET %s: read body: %w", path, err)
	}
	var reply struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &reply); err != nil {
		return fmt.Errorf("jaegertest: GET %s: %s: %q is not a query API reply: %w", path, resp.Status, truncate(body), err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return ErrTraceNotFound
	}
	if resp.StatusCode != http.StatusOK || len(reply.Errors) > 0 {
		var msgs []string
		for _, e := range reply.Errors {
			msgs = append(msgs, e.Msg)
		}
		return fmt.Errorf("jaegertest: GET %s: %s: %s", path, resp.Status, strings.Join(msgs, "; "))
	}
	if len(reply.Data) == 0 || string(reply.Data) == "null" {
		return nil
	}
	if err := json.Unmarshal(reply.Data, data); err != nil {
		return fmt.Errorf("jaegertest: GET %s: decode data: %w", path, err)
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 512 {
		return string(b[:512]) + "…"
	}
	return string(b)
}

// The v1 JSON of Jaeger's query API (its internal/uimodel package).
type jsonTrace struct {
	TraceID   string                 `json:"traceID"`
	Spans     []jsonSpan             `json:"spans"`
	Processes map[string]jsonProcess `json:"processes"`
	Warnings  []string               `json:"warnings"`
}

type jsonSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64        `json:"startTime"` // µs since the epoch
	Duration  int64        `json:"duration"`  // µs
	Tags      []jsonKV     `json:"tags"`
	Logs      []jsonLog    `json:"logs"`
	ProcessID string       `json:"processID"`
	Process   *jsonProcess `json:"process"`
	Warnings  []string     `json:"warnings"`
}

type jsonProcess struct {
	ServiceName string   `json:"serviceName"`
	Tags        []jsonKV `json:"tags"`
}

type jsonLog struct {
	Timestamp int64    `json:"timestamp"` // µs since the epoch
	Fields    []jsonKV `json:"fields"`
}

type jsonKV struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

func (r jsonTrace) convert() (Trace, error) {
	tr := Trace{TraceID: padHex(r.TraceID, 32), Warnings: r.Warnings}
	for _, js := range r.Spans {
		proc := js.Process
		if proc == nil {
			if p, ok := r.Processes[js.ProcessID]; ok {
				proc = &p
			}
		}
		s := Span{
			TraceID:  padHex(js.TraceID, 32),
			SpanID:   padHex(js.SpanID, 16),
			Name:     js.OperationName,
			Start:    time.UnixMicro(js.StartTime),
			Duration: time.Duration(js.Duration) * time.Microsecond,
			Warnings: js.Warnings,
		}
		for _, ref := range js.References {
			if ref.RefType == "CHILD_OF" {
				s.ParentSpanID = padHex(ref.SpanID, 16)
				break
			}
		}
		attrs, err := decodeKVs(js.Tags)
		if err != nil {
			return Trace{}, fmt.Errorf("jaegertest: span %s tags: %w", js.SpanID, err)
		}
		if k, ok := attrs["span.kind"].(string); ok {
			s.Kind = k
			delete(attrs, "span.kind")
		}
		s.Attributes = attrs
		if proc != nil {
			s.Service = proc.ServiceName
			res, err := decodeKVs(proc.Tags)
			if err != nil {
				return Trace{}, fmt.Errorf("jaegertest: process %s tags: %w", js.ProcessID, err)
			}
			delete(res, "service.name")
			s.Resource = res
		}
		for _, l := range js.Logs {
			fields, err := decodeKVs(l.Fields)
			if err != nil {
				return Trace{}, fmt.Errorf("jaegertest: span %s log fields: %w", js.SpanID, err)
			}
			ev := Event{Time: time.UnixMicro(l.Timestamp), Attributes: fields}
			if name, ok := fields["event"].(string); ok {
				ev.Name = name
				delete(fields, "event")
			}
			s.Events = append(s.Events, ev)
		}
		tr.Spans = append(tr.Spans, s)
	}
	slices.SortStableFunc(tr.Spans, func(a, b Span) int { return a.Start.Compare(b.Start) })
	return tr, nil
}

// decodeKVs turns Jaeger's typed key-values into a map of Go values.
func decodeKVs(kvs []jsonKV) (map[string]any, error) {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v, err := decodeValue(kv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		m[kv.Key] = v
	}
	return m, nil
}

func decodeValue(kv jsonKV) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(kv.Value))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch kv.Type {
	case "int64":
		if n, ok := v.(json.Number); ok {
			return n.Int64()
		}
	case "float64":
		if n, ok := v.(json.Number); ok {
			return n.Float64()
		}
	case "binary":
		if s, ok := v.(string); ok {
			return base64.StdEncoding.DecodeString(s)
		}
	case "bool":
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case "", "string":
		if s, ok := v.(string); ok {
			return s, nil
		}
	}
	if n, ok := v.(json.Number); ok { // an unknown type: keep the number usable
		return n.String(), nil
	}
	return v, nil
}

// padHex left-pads a hex ID with zeros: Jaeger writes a trace ID whose high 64 bits are zero,
// and IDs with leading zero digits, shorter than OpenTelemetry does.
func padHex(id string, n int) string {
	id = strings.ToLower(id)
	if len(id) < n {
		id = strings.Repeat("0", n-len(id)) + id
	}
	return id
}
