package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkGatewayStages is where a call's time goes, stage by stage, from
// the spans mcpbus makes when tracing is on (a recording provider in this
// process, as an operator's Jaeger export would make them): the in-process
// gateway of BenchmarkGatewayEdge, one caller. Each stage is the median over
// the calls of the time a span holds outside its child span (the time
// before the child starts plus after it ends), in µs:
//
//   - outside-µs: the call's wall time minus the HTTP request's span: the
//     client (go-sdk or net/http), the loopback hop and net/http's reading
//     and writing of the request;
//   - http-µs: the request's span around the tool call: middleware (auth,
//     limits, metrics, access log), the JSON-RPC decode, the session, the
//     reply's encode;
//   - gateway-µs: the gateway's tool call around the bus request: the
//     argument check, approvals, the catalog (on /mcp/invoke the handler's
//     decode and reply, which have no span of their own, are in http-µs);
//   - handoff-µs: the bus request around the runner's processing: headers,
//     the principal, the in-process hand-off and its reply;
//   - runner-µs: the runner's processing around the server's tools/call:
//     the argument check, secret scans of arguments and result, the reply;
//   - server-µs: the tools/call to the test server over stdio (its own
//     process), the runner's raw connection.
//
// Spans cost time of their own (a few µs each), so the stages add up to
// more than an untraced call takes; they say where the time goes, not what
// a call costs:
//
//	go test -run '^$' -bench 'GatewayStages' -benchtime 2000x ./bench/
func BenchmarkGatewayStages(b *testing.B) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	b.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	e := startGateway(b)
	for _, row := range edgeRows(e) {
		b.Run(row.name, func(b *testing.B) {
			call := row.mk(b)
			for range 200 {
				edgeCall(b, call)
			}
			rec.Reset()
			walls := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				edgeCall(b, call)
				walls = append(walls, time.Since(start))
			}
			b.StopTimer()
			reportStages(b, rec.Ended(), walls)
		})
	}
}

// stageSpans names, outermost first, the spans of one call and the stage
// each holds outside its child.
var stageSpans = []struct{ prefix, stage string }{
	{"POST /mcp", "http"},
	{"tools/call " + gwTool, "gateway"},
	{"send mcp.v1.call.", "handoff"},
	{"process mcp.v1.call.", "runner"},
	{"tools/call echo", "server"},
}

// reportStages reports the median of each stage over the traces in spans,
// and outside-µs from the calls' wall times.
func reportStages(b *testing.B, spans []sdktrace.ReadOnlySpan, walls []time.Duration) {
	b.Helper()
	level := func(name string) int {
		for i, s := range stageSpans {
			if len(name) >= len(s.prefix) && name[:len(s.prefix)] == s.prefix {
				return i
			}
		}
		return -1
	}
	traces := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		traces[s.SpanContext().TraceID()] = append(traces[s.SpanContext().TraceID()], s)
	}
	stages := make([][]time.Duration, len(stageSpans))
	var outer []time.Duration // the outermost span's length
	for _, ss := range traces {
		byLevel := make([]sdktrace.ReadOnlySpan, len(stageSpans))
		for _, s := range ss {
			if l := level(s.Name()); l >= 0 && byLevel[l] == nil {
				byLevel[l] = s
			}
		}
		var chain []int // the levels present, outermost first
		for l, s := range byLevel {
			if s != nil {
				chain = append(chain, l)
			}
		}
		if len(chain) == 0 {
			continue
		}
		for i, l := range chain {
			s := byLevel[l]
			d := s.EndTime().Sub(s.StartTime())
			if i+1 < len(chain) {
				c := byLevel[chain[i+1]]
				d -= c.EndTime().Sub(c.StartTime())
			}
			stages[l] = append(stages[l], d)
		}
		o := byLevel[chain[0]]
		outer = append(outer, o.EndTime().Sub(o.StartTime()))
	}
	if len(outer) < len(walls)/2 {
		b.Fatalf("%d traces for %d calls: the spans of a call were not recorded", len(outer), len(walls))
	}
	med := func(v []time.Duration) float64 {
		slices.Sort(v)
		return float64(v[len(v)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(med(walls)-med(outer), "outside-µs")
	for l, v := range stages {
		if len(v) > 0 {
			b.ReportMetric(med(v), stageSpans[l].stage+"-µs")
		}
	}
	b.ReportMetric(med(walls), "wall-p50-µs")
}
