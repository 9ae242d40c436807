//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package mcpserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// A server's elicitation and sampling during a call reach the /mcp client
// that declared them, on the call's own stream, and its answers reach the
// server; a client that declared neither gets a clear tool failure.
func TestServerRequestsRelayedToTheMCPClient(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)

	var elicited, sampled []string
	mc := mcp.NewClient(&mcp.Implementation{Name: "asking-client", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited = append(elicited, req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Grace"}}, nil
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			sampled = append(sampled, req.Params.Messages[0].Content.(*mcp.TextContent).Text)
			return &mcp.CreateMessageResult{Model: "local", Role: "assistant", Content: &mcp.TextContent{Text: "blue"}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A stateful session: the requests go out on the call's stream (2026-07-28: mrtr_test.go).
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, MaxRetries: -1, HTTPClient: http.DefaultClient},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__ask", Arguments: map[string]any{"message": "Your name?"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "hello Grace" || len(elicited) != 1 || elicited[0] != "Your name?" {
		t.Fatalf("ask = %q, elicitations seen %q", got, elicited)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__sample", Arguments: map[string]any{"message": "sky colour?"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "local said: blue" || len(sampled) != 1 || sampled[0] != "sky colour?" {
		t.Fatalf("sample = %q, sampling requests seen %q", got, sampled)
	}
	// Plain calls still work on such a session (through go-sdk, not the fast path).
	if res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "hi"}}); err != nil || textOf(t, res) != "hi" {
		t.Fatalf("echo on an asking session: %v %+v", err, res)
	}

	plain := connect(t, e.url, "", nil) // declares neither capability
	_, err = plain.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__ask", Arguments: map[string]any{"message": "Your name?"}})
	if err == nil || !strings.Contains(err.Error(), "no caller to relay elicitation/create") {
		t.Fatalf("ask from a client without elicitation: err = %v, want a clear failure", err)
	}
}

// A session client's person may take longer than the call timeout to answer
// a server's form: the wait does not count against it (the gateway's nor the
// runner's, which gets the gateway's as Mcp-Timeout-Ms). Sampling counts.
func TestSessionInputWaitDoesNotCountAgainstTheCallTimeout(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true, CallTimeout: time.Second}, nil)
	e.addServer(t, "alpha", nil)
	slow := func(ctx context.Context) error {
		select {
		case <-time.After(2500 * time.Millisecond): // a person reading the form
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "slow-person", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if err := slow(ctx); err != nil {
				return nil, err
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Grace"}}, nil
		},
		CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			if err := slow(ctx); err != nil {
				return nil, err
			}
			return &mcp.CreateMessageResult{Model: "local", Role: "assistant", Content: &mcp.TextContent{Text: "blue"}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, MaxRetries: -1, HTTPClient: http.DefaultClient},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__ask", Arguments: map[string]any{"message": "Your name?"}})
	if err != nil || res.IsError || textOf(t, res) != "hello Grace" {
		t.Fatalf("an answer after the call timeout: %v %+v", err, res)
	}
	start := time.Now()
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__sample", Arguments: map[string]any{"message": "sky colour?"}})
	if err == nil && !res.IsError {
		t.Fatalf("a sampling answer after the call timeout succeeded: %+v", res)
	}
	if took := time.Since(start); took > 2400*time.Millisecond {
		t.Fatalf("the sampling call took %s, want about its 1s timeout", took)
	}
}
