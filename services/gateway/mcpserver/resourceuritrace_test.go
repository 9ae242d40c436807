package mcpserver_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// A resource URI may carry a credential (a presigned URL's signature in its
// query, user:password@ in its authority): the gateway's SERVER span and
// the runner's CLIENT span of a resources/read record mcp.resource.uri
// without userinfo, query and fragment, not as the client sent it.
func TestResourceURISpansLeaveCredentialsOut(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	const secretUser, secretSig, secretFrag = "s3cr3t-pw", "s3cr3t-sig", "s3cr3t-frag"
	original := "https://reader:" + secretUser + "@bucket.example/report.pdf?X-Amz-Signature=" + secretSig + "#" + secretFrag
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The test server has no such resource: the read fails, its spans
	// are recorded all the same.
	_, _ = c.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcpbus://alpha/" + url.PathEscape(original)})

	want := map[trace.SpanKind]string{
		trace.SpanKindServer: "mcpbus://alpha/" + url.PathEscape("https://bucket.example/report.pdf"),
		trace.SpanKindClient: "https://bucket.example/report.pdf",
	}
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		got := map[trace.SpanKind]string{}
		for _, s := range exp.GetSpans() {
			for _, kv := range s.Attributes {
				if kv.Key != "mcp.resource.uri" {
					continue
				}
				v := kv.Value.AsString()
				for _, secret := range []string{secretUser, secretSig, secretFrag} {
					if strings.Contains(v, secret) {
						return false, fmt.Sprintf("span %q (%v) records mcp.resource.uri=%s", s.Name, s.SpanKind, v)
					}
				}
				got[s.SpanKind] = v
			}
		}
		for kind, uri := range want {
			if got[kind] != uri {
				return false, fmt.Sprintf("mcp.resource.uri of the %v span: %q, want %q", kind, got[kind], uri)
			}
		}
		return true, ""
	})
}
