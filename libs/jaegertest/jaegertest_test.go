package jaegertest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild"
	"github.com/mcpbus/mcpbus/libs/internal/toolbuild/toolbuildtest"
)

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Jaeger (the first run on a machine builds it: ~10 minutes)")
	}
}

// exportTwoSpans exports a server span with a client child span through exp, as service, and
// returns both span contexts.
func exportTwoSpans(t *testing.T, exp sdktrace.SpanExporter, service string) (parent, child trace.SpanContext) {
	t.Helper()
	res := resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("deployment.environment", "test"),
	)
	// A syncer exports each span as it ends: nothing waits in a batch.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	tr := tp.Tracer("jaegertest")

	ctx, server := tr.Start(t.Context(), "GET /things", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", "GET"),
			attribute.Int("http.response.status_code", 200),
			attribute.Float64("load", 0.5),
			attribute.Bool("cached", true),
		))
	_, client := tr.Start(ctx, "db.query", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
	client.AddEvent("retry", trace.WithAttributes(attribute.Int("attempt", 1)))
	client.SetStatus(codes.Error, "boom")
	client.End()
	server.End()
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatalf("export to jaeger: %v", err)
	}
	return server.SpanContext(), client.SpanContext()
}

// checkTwoSpans checks that tr is the trace exportTwoSpans made.
func checkTwoSpans(t *testing.T, tr Trace, service string, parent, child trace.SpanContext) {
	t.Helper()
	if tr.TraceID != parent.TraceID().String() || len(tr.Spans) != 2 {
		t.Fatalf("want trace %s with 2 spans, got %s", parent.TraceID(), tr)
	}
	srv, ok := tr.Find("GET /things")
	if !ok {
		t.Fatalf("no server span in %s", tr)
	}
	cli, ok := tr.Find("db.query")
	if !ok {
		t.Fatalf("no client span in %s", tr)
	}
	if srv.SpanID != parent.SpanID().String() || srv.ParentSpanID != "" || srv.Kind != "server" ||
		srv.Service != service || srv.TraceID != tr.TraceID {
		t.Errorf("server span = %+v, want span %s, no parent, kind server, service %s", srv, parent.SpanID(), service)
	}
	if cli.SpanID != child.SpanID().String() || cli.ParentSpanID != srv.SpanID || cli.Kind != "client" || cli.Service != service {
		t.Errorf("client span = %+v, want span %s, parent %s, kind client, service %s", cli, child.SpanID(), srv.SpanID, service)
	}
	if p, ok := tr.Parent(cli); !ok || p.SpanID != srv.SpanID {
		t.Errorf("Parent(client) = %+v, %v; want the server span", p, ok)
	}
	for k, want := range map[string]any{
		"http.request.method":       "GET",
		"http.response.status_code": int64(200),
		"load":                      0.5,
		"cached":                    true,
	} {
		if got := srv.Attributes[k]; got != want {
			t.Errorf("server attribute %s = %#v, want %#v", k, got, want)
		}
	}
	if _, ok := srv.Attributes["span.kind"]; ok {
		t.Error("span.kind left in Attributes")
	}
	for k, want := range map[string]any{
		"db.system.name":          "postgresql",
		"otel.status_code":        "ERROR",
		"otel.status_description": "boom",
	} {
		if got := cli.Attributes[k]; got != want {
			t.Errorf("client attribute %s = %#v, want %#v", k, got, want)
		}
	}
	if got := srv.Resource["deployment.environment"]; got != "test" {
		t.Errorf("resource deployment.environment = %#v, want test (resource %v)", got, srv.Resource)
	}
	if len(cli.Events) != 1 || cli.Events[0].Name != "retry" || cli.Events[0].Attributes["attempt"] != int64(1) {
		t.Errorf("client events = %+v, want one retry event with attempt=1", cli.Events)
	}
	if cli.Start.Before(srv.Start) || cli.Duration <= 0 || srv.Duration < cli.Duration ||
		time.Since(srv.Start) > time.Minute || time.Since(srv.Start) < 0 {
		t.Errorf("timing: server %s +%s, client %s +%s", srv.Start, srv.Duration, cli.Start, cli.Duration)
	}
}

func TestTracesOverOTLPHTTPAndGRPC(t *testing.T) {
	skipShort(t)
	j := Start(t)
	for _, addr := range []string{j.OTLPHTTPEndpoint, "http://" + j.OTLPGRPCEndpoint, j.QueryURL} {
		if !strings.HasPrefix(addr, "http://127.0.0.1:") || strings.HasSuffix(addr, ":0") {
			t.Fatalf("address %q, want 127.0.0.1:<free port>", addr)
		}
	}

	var exported []string // the services of the subtests that ran (-run may pick one)
	t.Run("http", func(t *testing.T) {
		exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(j.OTLPHTTPEndpoint+"/v1/traces"))
		if err != nil {
			t.Fatal(err)
		}
		parent, child := exportTwoSpans(t, exp, "jaegertest-http")
		tr := j.WaitTrace(t, parent.TraceID().String(), func(tr Trace) bool { return len(tr.Spans) == 2 })
		t.Logf("%s", tr)
		checkTwoSpans(t, tr, "jaegertest-http", parent, child)
		exported = append(exported, "jaegertest-http")

		// The same trace through the search by service.
		trs, err := j.Traces(t.Context(), "jaegertest-http")
		if err != nil {
			t.Fatal(err)
		}
		if len(trs) != 1 {
			t.Fatalf("Traces(jaegertest-http) = %d traces, want 1", len(trs))
		}
		checkTwoSpans(t, trs[0], "jaegertest-http", parent, child)
	})

	t.Run("grpc", func(t *testing.T) {
		exp, err := otlptracegrpc.New(t.Context(), otlptracegrpc.WithEndpoint(j.OTLPGRPCEndpoint), otlptracegrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		parent, child := exportTwoSpans(t, exp, "jaegertest-grpc")
		trs := j.WaitTraces(t, "jaegertest-grpc", func(trs []Trace) bool { return len(trs) == 1 && len(trs[0].Spans) == 2 })
		checkTwoSpans(t, trs[0], "jaegertest-grpc", parent, child)
		exported = append(exported, "jaegertest-grpc")
	})

	// Exporters configured by the standard variables alone, as the services' are.
	for _, proto := range []string{"http/protobuf", "grpc"} {
		service := "jaegertest-env-" + strings.ReplaceAll(proto, "/", "-")
		t.Run("env "+proto, func(t *testing.T) {
			for _, kv := range j.OTLPEnv(proto) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			var exp sdktrace.SpanExporter
			var err error
			if proto == "grpc" {
				exp, err = otlptracegrpc.New(t.Context())
			} else {
				exp, err = otlptracehttp.New(t.Context())
			}
			if err != nil {
				t.Fatal(err)
			}
			parent, child := exportTwoSpans(t, exp, service)
			tr := j.WaitTrace(t, parent.TraceID().String(), func(tr Trace) bool { return len(tr.Spans) == 2 })
			checkTwoSpans(t, tr, service, parent, child)
			exported = append(exported, service)
		})
	}

	services, err := j.Services(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(exported)
	if !slices.Equal(services, exported) {
		t.Fatalf("services = %q, want %q", services, exported)
	}
	if trs, err := j.Traces(t.Context(), "no-such-service"); err != nil || len(trs) != 0 {
		t.Fatalf("Traces(no-such-service) = %v, %v; want none", trs, err)
	}
	if _, err := j.Trace(t.Context(), "0123456789abcdef0123456789abcdef"); err != ErrTraceNotFound {
		t.Fatalf("Trace(unknown id) error = %v, want ErrTraceNotFound", err)
	}
}

func TestAwaitTraceGivesUpWithTheLastVersion(t *testing.T) {
	skipShort(t)
	j := Start(t)
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(j.OTLPHTTPEndpoint+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	parent, _ := exportTwoSpans(t, exp, "jaegertest-await")

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	tr, err := j.AwaitTrace(ctx, parent.TraceID().String(), func(tr Trace) bool { return len(tr.Spans) == 3 })
	if err == nil || len(tr.Spans) != 2 || !strings.Contains(err.Error(), "db.query") {
		t.Fatalf("AwaitTrace for a third span = %s, %v; want the 2-span trace and an error showing it", tr, err)
	}

	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := j.AwaitTrace(ctx, "0123456789abcdef0123456789abcdef", nil); err == nil || !strings.Contains(err.Error(), "trace not found") {
		t.Fatalf("AwaitTrace(unknown id) error = %v, want a timeout naming the last answer", err)
	}
}

func TestTwoServersSideBySide(t *testing.T) {
	skipShort(t)
	a, b := Start(t), Start(t)
	if a.QueryURL == b.QueryURL || a.OTLPHTTPEndpoint == b.OTLPHTTPEndpoint || a.OTLPGRPCEndpoint == b.OTLPGRPCEndpoint {
		t.Fatalf("servers share addresses: %+v %+v", a, b)
	}
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(a.OTLPHTTPEndpoint+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	parent, _ := exportTwoSpans(t, exp, "jaegertest-a")
	a.WaitTrace(t, parent.TraceID().String(), nil)
	if _, err := b.Trace(t.Context(), parent.TraceID().String()); err != ErrTraceNotFound {
		t.Fatalf("the other server: %v, want ErrTraceNotFound", err)
	}
}

// startChild starts Jaeger for toolbuildtest's checks; its query API answers while it runs.
func startChild(t testing.TB) toolbuildtest.Child {
	s := Start(t)
	return toolbuildtest.Child{Proc: s.proc, Stop: s.Stop, Kill: s.Kill, URL: s.QueryURL + "/api/services"}
}

func TestStopAndKillEndTheServer(t *testing.T) {
	skipShort(t)
	toolbuildtest.StopAndKill(t, "jaeger", StopTimeout, startChild)
}

func TestBinaryIsBuiltOnceAndShared(t *testing.T) {
	skipShort(t)
	toolbuildtest.BinaryIsCached(t, spec, BuildTimeout, Binary)
}

func TestConfigAndModuleAreInTheRepo(t *testing.T) {
	root, err := toolbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"go.work", filepath.Join(srcDir, "go.mod"), configFile} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Fatalf("repo root %s: %v", root, err)
		}
	}
}
