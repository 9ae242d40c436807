package gateway

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// otlpSpan is one span an OTLP/HTTP export delivered.
type otlpSpan struct {
	service, name, id, parent, trace string
	kind                             tracepb.Span_SpanKind
}

// otlpSpans stands in for a trace backend's OTLP/HTTP receiver.
type otlpSpans struct {
	*httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
}

func newOTLPSpans(t *testing.T) *otlpSpans {
	t.Helper()
	s := &otlpSpans{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, _ := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					s.spans = append(s.spans, otlpSpan{service: service, name: sp.Name, kind: sp.Kind,
						id: hex.EncodeToString(sp.SpanId), parent: hex.EncodeToString(sp.ParentSpanId), trace: hex.EncodeToString(sp.TraceId)})
				}
			}
		}
		s.mu.Unlock()
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(s.Close)
	return s
}

// find is the span of trace named name (by the service), if exported.
func (s *otlpSpans) find(trace, service, name string) (otlpSpan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.spans {
		if sp.trace == trace && sp.service == service && sp.name == name {
			return sp, true
		}
	}
	return otlpSpan{}, false
}

// mcpbus serve-stdio exports its spans as the gateway does, so a call made
// over stdio is one trace: the client's traceparent in _meta → serve-stdio's
// tools/call SERVER span → its bus send → the runner's process span and
// tools/call (mcpbus up, exporting too).
func TestServeStdioIsTraced(t *testing.T) {
	t.Parallel()
	sink := newOTLPSpans(t)
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_BSP_SCHEDULE_DELAY=100"}
	up := startUpGatewayEnv(t, mcpbusBin, func(string) []string { return otel }, "alpha")

	cmd := up.CLI().Command(context.Background(), "serve-stdio")
	cmd.Env = append(cmd.Env, otel...)
	stderr := &testkit.LogBuffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctxT(t, 60*time.Second),
		&mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("serve-stdio: %v\nstderr: %s", err, stderr.String())
	}
	defer func() { _ = cs.Close() }()
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	waitList(t, cs, 30*time.Second, "alpha__echo", func(m map[string]*mcp.Tool) bool { return m["alpha__echo"] != nil })
	p := &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "traced"},
		Meta: mcp.Meta{"traceparent": "00-" + traceID + "-" + clientSpan + "-01"}}
	if res, err := cs.CallTool(ctxT(t, 30*time.Second), p); err != nil || res.IsError {
		t.Fatalf("alpha__echo over stdio: %v %+v", err, res)
	}
	// Closing stdin ends serve-stdio, which flushes its spans.
	_ = cs.Close()

	const send = "send mcp.v1.call.{server}.{tool}"
	var srv, snd, proc, call otlpSpan
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		var ok [4]bool
		srv, ok[0] = sink.find(traceID, "mcpbus-serve-stdio", "tools/call alpha__echo")
		snd, ok[1] = sink.find(traceID, "mcpbus-serve-stdio", send)
		proc, ok[2] = sink.find(traceID, "mcpbus", "process mcp.v1.call.{server}.{tool}")
		call, ok[3] = sink.find(traceID, "mcpbus", "tools/call echo")
		return ok == [4]bool{true, true, true, true}, fmt.Sprintf("spans of the trace exported (serve-stdio tools/call, send; up process, tools/call): %v", ok)
	})
	if srv.parent != clientSpan || srv.kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("serve-stdio's tools/call: parent %s kind %v, want the client's %s, SERVER", srv.parent, srv.kind, clientSpan)
	}
	if snd.parent != srv.id || proc.parent != snd.id || call.parent != proc.id {
		t.Errorf("not chained tools/call alpha__echo → send → process → tools/call echo: %+v %+v %+v %+v", srv, snd, proc, call)
	}
}
