package mcpserver_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// A retry passed on to the instance holding its call is processed there in
// the retry's trace: the sending instance's send span has the holder's
// CONSUMER span as its child.
func TestRetryOnAnotherInstanceIsOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	principals := map[string]*auth.Principal{"key-a": {KeyID: "k-a", Scopes: []string{auth.ScopeCall}}}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	other, err := mcpserver.New(ctx, e.NC, mcpserver.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	srv := httptest.NewServer(keys(principals)(other.Handler()))
	t.Cleanup(srv.Close)

	id, state := firstRound(t, e.url, "key-a")
	m := retry(t, srv.URL, "key-a", "alpha__ask", fmt.Sprintf(`{%q:{"action":"accept","content":{"name":"Lin"}}}`, id), state)
	if m.Error != nil || !strings.Contains(string(m.Result["content"]), "hello Lin") {
		t.Fatalf("retry on the other instance answered %+v %v", m.Error, m.Result)
	}
	const tmpl = "mcp.v1.gateway.retry.{instance}"
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		var send, process tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "send " + tmpl:
				send = s
			case "process " + tmpl:
				process = s
			}
		}
		switch {
		case send.Name == "":
			return false, "no send span of the passed-on retry"
		case process.Name == "":
			return false, "the holder recorded no process span of the passed-on retry"
		case process.SpanKind != trace.SpanKindConsumer || process.Parent.SpanID() != send.SpanContext.SpanID() ||
			process.SpanContext.TraceID() != send.SpanContext.TraceID():
			return false, fmt.Sprintf("process span (kind %v) under %s, want a CONSUMER under the send span %s", process.SpanKind, process.Parent.SpanID(), send.SpanContext.SpanID())
		}
		return true, ""
	})
}
