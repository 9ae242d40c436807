package telemetry

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Every sample lands in the series of its own attributes, whether its set
// was cached or made anew, and lists that would read alike once joined
// ("a"+"bc" and "ab"+"c", a string "1" and an int 1) stay apart.
func TestHistogramSeries(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, err := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t").Float64Histogram("d")
	if err != nil {
		t.Fatal(err)
	}
	hist := NewHistogram(h)
	lists := [][]attribute.KeyValue{
		{attribute.String("a", "bc")},
		{attribute.String("ab", "c")},
		{attribute.String("a", "1")},
		{attribute.Int("a", 1)},
		{attribute.Bool("a", true)},
		{attribute.Float64("a", 1)},
		{attribute.StringSlice("a", []string{"x", "y"})},
		{attribute.StringSlice("a", []string{"x y"})},
		{attribute.String("m", "tools/call"), attribute.String("s", "x\x00y")},
		{attribute.String("s", "x\x00y"), attribute.String("m", "tools/call")}, // the same set in another order
	}
	ctx := context.Background()
	for range 3 { // the first round makes the sets, the others reuse them
		for i, l := range lists {
			hist.Record(ctx, float64(i+1), l)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	points := rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints
	if len(points) != len(lists)-1 {
		var got []string
		for _, p := range points {
			got = append(got, fmt.Sprint(p.Attributes.ToSlice()))
		}
		t.Fatalf("%d series, want %d: %v", len(points), len(lists)-1, got)
	}
	for i, l := range lists[:len(lists)-1] {
		set := attribute.NewSet(l...)
		var p *metricdata.HistogramDataPoint[float64]
		for j := range points {
			if points[j].Attributes.Equals(&set) {
				p = &points[j]
			}
		}
		want := uint64(3)
		if i == len(lists)-2 {
			want = 6 // with the last list, in another order
		}
		if p == nil || p.Count != want {
			t.Errorf("series %v: %+v, want %d samples", l, p, want)
		}
	}
}

// Past maxSets distinct lists a sample still records, with a set made for it.
func TestHistogramSetsBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, _ := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t").Float64Histogram("d")
	hist := NewHistogram(h)
	for i := range maxSets + 10 {
		hist.Record(context.Background(), 1, []attribute.KeyValue{attribute.Int("i", i)})
	}
	if n := len(hist.sets.m); n != maxSets {
		t.Fatalf("%d sets kept, want %d", n, maxSets)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	// The SDK folds series past its own limit into an overflow series: count
	// the samples.
	var n uint64
	for _, p := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints {
		n += p.Count
	}
	if n != maxSets+10 {
		t.Fatalf("%d samples recorded, want %d", n, maxSets+10)
	}
}

// The zero Histogram records nothing and does not fail.
func TestZeroHistogram(t *testing.T) {
	Histogram{}.Record(context.Background(), 1, []attribute.KeyValue{attribute.String("a", "b")})
}

// BenchmarkHistogramRecord is a sample of an operation's six attributes,
// through Histogram and through metric.WithAttributes (the way before).
func BenchmarkHistogramRecord(b *testing.B) {
	h, _ := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())).Meter("t").Float64Histogram("d")
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", "tools/call"), attribute.String("mcpbus.server", "bench"),
		attribute.String("network.transport", "pipe"), attribute.String("mcp.protocol.version", "2025-11-25"),
		attribute.String("gen_ai.tool.name", "echo"), attribute.String("gen_ai.operation.name", "execute_tool")}
	ctx := context.Background()
	hist := NewHistogram(h)
	b.Run("cached-set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hist.Record(ctx, 0.001, attrs)
		}
	})
	b.Run("with-attributes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.Record(ctx, 0.001, metricWithAttributes(attrs))
		}
	})
}

func metricWithAttributes(attrs []attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(attrs...)
}

// A string a client chose (an unknown tool's name) is cut before it is a
// label: neither the series nor the cached sets keep a MiB of it; the
// caller's list is left as it was.
func TestHistogramBoundsLabels(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, err := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t").Float64Histogram("d")
	if err != nil {
		t.Fatal(err)
	}
	hist := NewHistogram(h)
	huge := strings.Repeat("ü", 1<<19)
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", huge)}
	hist.Record(context.Background(), 1, attrs)
	if attrs[1].Value.AsString() != huge {
		t.Error("Record changed the caller's attributes")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	dps := rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints
	if len(dps) != 1 {
		t.Fatalf("%d series", len(dps))
	}
	v, _ := dps[0].Attributes.Value("gen_ai.tool.name")
	if s := v.AsString(); len(s) > MaxLabelLen || !utf8.ValidString(s) || !strings.HasPrefix(s, "üü") {
		t.Errorf("label of %d bytes (valid UTF-8 %v), want at most %d", len(s), utf8.ValidString(s), MaxLabelLen)
	}
	if m, _ := dps[0].Attributes.Value("mcp.method.name"); m.AsString() != "tools/call" {
		t.Errorf("mcp.method.name %q", m.AsString())
	}
	for k := range hist.sets.m {
		if len(k) > 2*MaxLabelLen {
			t.Errorf("a cached set's key is %d bytes", len(k))
		}
	}
}

// A bounded attribute keeps its first Max values per scope; the rest, of
// however many, share one series (Other), and one scope filling up leaves
// another's values alone. Unbounded attributes are untouched.
func TestHistogramBounds(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, err := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t").Float64Histogram("d")
	if err != nil {
		t.Fatal(err)
	}
	const max = 50
	hist := NewHistogram(h,
		Bound{Key: "tool", Max: max, Scope: ScopeBy("server")},
		Bound{Key: "error", Max: 3})
	ctx := context.Background()
	// A hostile server names max+1000 tools, twice (cached sets, then not).
	for range 2 {
		for i := range max + 1000 {
			hist.Record(ctx, 1, []attribute.KeyValue{attribute.String("server", "evil"), attribute.String("tool", fmt.Sprint("t", i))})
		}
	}
	// A well-behaved server's tools still get their own series.
	hist.Record(ctx, 1, []attribute.KeyValue{attribute.String("server", "good"), attribute.String("tool", "echo")})
	for i := range 10 {
		hist.Record(ctx, 1, []attribute.KeyValue{attribute.String("server", "good"), attribute.String("tool", "echo"), attribute.String("error", fmt.Sprint("E", i))})
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	series := map[string]uint64{}
	for _, p := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints {
		series[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Count
	}
	// evil: max tools + Other; good: echo, echo with 3 errors + Other.
	if want := max + 1 + 1 + 3 + 1; len(series) != want {
		t.Errorf("%d series, want %d", len(series), want)
	}
	if n := series["server=evil,tool="+Other]; n != 2*1000 {
		t.Errorf("evil's Other series counts %d samples, want %d", n, 2*1000)
	}
	if n := series["server=evil,tool=t0"]; n != 2 {
		t.Errorf("evil's first tool counts %d samples, want 2", n)
	}
	if n := series["server=good,tool=echo"]; n != 1 {
		t.Errorf("good's tool counts %d samples, want 1: %v", n, series)
	}
	if n := series["error="+Other+",server=good,tool=echo"]; n != 7 {
		t.Errorf("errors past the bound count %d samples, want 7", n)
	}
}

// The scopes of a Bound are bounded too: values of a scope past maxScopes
// are Other; and so are its values in all, past maxValues.
func TestHistogramBoundScopes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, _ := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t").Float64Histogram("d")
	hist := NewHistogram(h, Bound{Key: "tool", Max: 1, Scope: ScopeByPrefix("__")})
	ctx := context.Background()
	for i := range maxScopes + 1000 {
		hist.Record(ctx, 1, []attribute.KeyValue{attribute.String("tool", fmt.Sprintf("s%d__t", i))})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if n := len(rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints); n != maxScopes+1 {
		t.Errorf("%d series, want %d", n, maxScopes+1)
	}
}

func TestHistogramBoundValues(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, _ := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithCardinalityLimit(10_000)).Meter("t").Float64Histogram("d")
	hist := NewHistogram(h, Bound{Key: "tool", Max: 100, Scope: ScopeByPrefix("__")})
	ctx := context.Background()
	for i := range maxScopes {
		for j := range 100 {
			hist.Record(ctx, 1, []attribute.KeyValue{attribute.String("tool", fmt.Sprintf("s%d__t%d", i, j))})
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if n := len(rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints); n != maxValues+1 {
		t.Errorf("%d series, want %d", n, maxValues+1)
	}
}
