package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestFailoverIsAnOutage: while a server's runner is gone without handing it
// over (cut off the bus: its lease not yet expired, nobody else serving),
// its listed tools answer SERVICE_UNAVAILABLE with a retry hint on
// /mcp/invoke (503, Retry-After) and a tool error saying "temporarily
// unavailable" on /mcp, never "not found" or "unknown tool"; once another
// runner takes the server over, calls work again.
func TestFailoverIsAnOutage(t *testing.T) {
	opts := quietRunner()
	opts.LeaseTTL = time.Second
	e := runnertest.Start(t, opts)
	// The takeover is polled every 20 ms: the key's rate limit is not what is tested.
	h := startGateway(t, e, gateway.Options{RateRPS: 1000, RateBurst: 1000})
	runServer(t, e, "alpha", nil)
	h.waitTool(h.admin, "alpha__echo")
	echo := map[string]any{"tool_name": "alpha__echo", "params": map[string]any{"message": "hi"}}
	if status, out := invoke(t, h, h.admin, echo); status != http.StatusOK || !out.Success {
		t.Fatalf("before the cut: %d %+v", status, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{h.admin}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// The runner dies as far as the bus can tell: no goodbye, no handover.
	e.CutOff(t, e.RunnerNC)
	status, out := invoke(t, h, h.admin, echo)
	r := h.do("POST", "/mcp/invoke", h.admin, echo) // again, for the header
	wantFailure(t, status, out, http.StatusServiceUnavailable, rest.ErrUnavailable, "")
	if out.Details.Code != apierr.ServiceUnavailable || !strings.Contains(out.Error, "temporarily unavailable") {
		t.Fatalf("during the failover: %+v", out)
	}
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "5" {
		t.Fatalf("during the failover: %d, Retry-After %q, want 503 and 5", r.status, r.header.Get("Retry-After"))
	}
	// The tool is still listed, as it should be.
	h.waitTool(h.admin, "alpha__echo")

	// /mcp: the fast path (a plain call) and go-sdk's path (with a progress token).
	for _, p := range []*mcp.CallToolParams{
		{Name: "alpha__echo", Arguments: map[string]any{"message": "hi"}},
		{Name: "alpha__echo", Arguments: map[string]any{"message": "hi"}, Meta: mcp.Meta{"progressToken": "p1"}},
	} {
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			t.Fatalf("/mcp during the failover (meta %v): %v, want a tool result", p.Meta, err)
		}
		text := ""
		if len(res.Content) == 1 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				text = tc.Text
			}
		}
		if !res.IsError || !strings.Contains(text, "temporarily unavailable") || !strings.Contains(text, "retry after 5 s") {
			t.Fatalf("/mcp during the failover (meta %v): isError %v %q", p.Meta, res.IsError, text)
		}
	}

	// Another runner takes the server over once the lease expires: the hint was honest.
	e.AddRunner(t, opts)
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		status, out := invoke(t, h, h.admin, echo)
		return status == http.StatusOK && out.Success, "still " + out.Error
	})
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "back"}})
	if err != nil || res.IsError {
		t.Fatalf("/mcp after the takeover: %v %+v", err, res)
	}
}
