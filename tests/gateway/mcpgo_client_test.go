package gateway

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgomcp "github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// TestMCPGoClient points mark3labs/mcp-go's client, as a Go user of that
// library would, at /mcp in both of its protocol eras: by default it probes
// server/discover and speaks 2026-07-28 (no session); with continuous
// listening it falls back to initialize and a session, whose GET stream
// carries tools/list_changed. Each era lists the tools, calls one, gets a
// schema mismatch back as a tool error, reads a resource and gets a prompt;
// a wrong key is refused.
func TestMCPGoClient(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	e.enable(t, binaryConfig("alpha", testServer, "-name", "alpha"))

	connect := func(t *testing.T, key string, opts ...mcpgotransport.StreamableHTTPCOption) (*mcpgo.Client, error) {
		t.Helper()
		opts = append(opts, mcpgotransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + key}),
			mcpgotransport.WithHTTPTimeout(30*time.Second))
		c, err := mcpgo.NewStreamableHttpClient(e.url+"/mcp", opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ctx := ctxT(t, 30*time.Second)
		if err := c.Start(ctx); err != nil {
			return c, err
		}
		init := mcpgomcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcpgomcp.LATEST_PROTOCOL_VERSION
		init.Params.ClientInfo = mcpgomcp.Implementation{Name: "mcp-go-test", Version: "1"}
		_, err = c.Initialize(ctx, init)
		return c, err
	}

	for _, era := range []struct {
		name, version string
		opts          []mcpgotransport.StreamableHTTPCOption
	}{
		{"2026-07-28", mcpgomcp.ProtocolVersion20260728, nil},
		//lint:ignore SA1019 the legacy era (a session and its GET stream) is what this case tests
		{"session", mcpgomcp.ProtocolVersion20251125, []mcpgotransport.StreamableHTTPCOption{mcpgotransport.WithContinuousListening()}},
	} {
		t.Run(era.name, func(t *testing.T) {
			c, err := connect(t, e.admin, era.opts...)
			if err != nil {
				t.Fatalf("connecting: %v", err)
			}
			if got := c.ProtocolVersion(); got != era.version {
				t.Fatalf("protocol %q, want %q", got, era.version)
			}
			if era.opts != nil && c.GetSessionId() == "" {
				t.Fatal("no session id on the legacy era")
			}
			var changed atomic.Int32
			c.OnNotification(func(n mcpgomcp.JSONRPCNotification) {
				if n.Method == string(mcpgomcp.MethodNotificationToolsListChanged) {
					changed.Add(1)
				}
			})
			ctx := ctxT(t, 60*time.Second)

			// The gateway's catalog follows the tools' KV record, written
			// after the server reports running: on a loaded machine it may
			// lag the state by a moment.
			names := map[string]bool{}
			testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
				tools, err := c.ListTools(ctx, mcpgomcp.ListToolsRequest{})
				if err != nil {
					t.Fatalf("tools/list: %v", err)
				}
				clear(names)
				for _, tl := range tools.Tools {
					names[tl.Name] = true
				}
				return names["alpha__echo"] && names["alpha__fail"], fmt.Sprintf("tools: %v", names)
			})

			call := func(name string, args map[string]any) *mcpgomcp.CallToolResult {
				t.Helper()
				req := mcpgomcp.CallToolRequest{}
				req.Params.Name, req.Params.Arguments = name, args
				res, err := c.CallTool(ctx, req)
				if err != nil {
					t.Fatalf("tools/call %s: %v", name, err)
				}
				return res
			}
			if res := call("alpha__echo", map[string]any{"message": "mcp-go " + era.name}); res.IsError || mcpgoText(res) != "mcp-go "+era.name {
				t.Fatalf("echo: %+v", res)
			}
			// A schema mismatch is the tool's error, with the gateway's message.
			if res := call("alpha__echo", map[string]any{"message": 5}); !res.IsError || !strings.Contains(mcpgoText(res), "message") {
				t.Fatalf("echo with a number: %+v", res)
			}
			if res := call("alpha__fail", map[string]any{"message": "boom"}); !res.IsError || mcpgoText(res) != "failed: boom" {
				t.Fatalf("fail: %+v", res)
			}

			rr := mcpgomcp.ReadResourceRequest{}
			rr.Params.URI = "mcpbus://alpha/test:%2F%2Fgreeting"
			read, err := c.ReadResource(ctx, rr)
			if err != nil || len(read.Contents) != 1 {
				t.Fatalf("resources/read: %+v %v", read, err)
			}
			if tc, ok := read.Contents[0].(mcpgomcp.TextResourceContents); !ok || tc.Text == "" {
				t.Fatalf("resources/read contents: %#v", read.Contents[0])
			}
			pr := mcpgomcp.GetPromptRequest{}
			pr.Params.Name, pr.Params.Arguments = "alpha__greet", map[string]string{"who": "mcp-go"}
			prompt, err := c.GetPrompt(ctx, pr)
			if err != nil || len(prompt.Messages) != 1 {
				t.Fatalf("prompts/get: %+v %v", prompt, err)
			}
			if tc, ok := prompt.Messages[0].Content.(mcpgomcp.TextContent); !ok || tc.Text != "Hello, mcp-go" {
				t.Fatalf("prompt message: %#v", prompt.Messages[0].Content)
			}

			if era.opts == nil {
				return
			}
			// The session's GET stream brings tools/list_changed when a
			// server's tools change.
			added := "added_" + strings.ReplaceAll(era.name, "-", "_")
			call("alpha__add_tool", map[string]any{"message": added})
			deadline := time.Now().Add(30 * time.Second)
			for changed.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no tools/list_changed on the session's stream in 30 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			tools, err := c.ListTools(ctx, mcpgomcp.ListToolsRequest{})
			if err != nil {
				t.Fatalf("tools/list after the change: %v", err)
			}
			found := false
			for _, tl := range tools.Tools {
				found = found || tl.Name == "alpha__"+added
			}
			if !found {
				t.Fatalf("alpha__%s is not listed after list_changed", added)
			}
		})
	}

	t.Run("wrong key", func(t *testing.T) {
		if _, err := connect(t, "mcpbus_not-a-key"); err == nil {
			t.Fatal("a wrong key connected")
		}
	})
}

// mcpgoText is the text of an mcp-go result's first content.
func mcpgoText(res *mcpgomcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(mcpgomcp.TextContent); ok {
		return tc.Text
	}
	return ""
}
