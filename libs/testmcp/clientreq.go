//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package testmcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// AskIn is the ask tool's input: the question, and how long to wait before
// asking it (the console's flows have a form arrive while an approval waits).
type AskIn struct {
	Message string `json:"message" jsonschema:"the question to ask"`
	MS      int    `json:"ms,omitempty" jsonschema:"milliseconds to wait before asking"`
}

// addClientRequestTools adds the tools that ask the client for something
// during the call: input from the user (elicitation), a model completion
// (sampling) and the client's roots. They return multi round-trip input
// requests (protocol 2026-07-28); go-sdk turns them into requests of their
// own for clients of older protocols.
func addClientRequestTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "Asks the user for their name, and optionally age and colour (elicitation), then greets them"},
		func(ctx context.Context, req *mcp.CallToolRequest, in AskIn) (*mcp.CallToolResult, any, error) {
			if r, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok {
				if r.Action != "accept" {
					return text("the user chose " + r.Action), nil, nil
				}
				greeting := fmt.Sprintf("hello %v", r.Content["name"])
				for _, k := range []string{"age", "colour"} {
					if v, ok := r.Content[k]; ok {
						greeting += fmt.Sprintf(", %s %v", k, v)
					}
				}
				return text(greeting), nil, nil
			}
			if in.MS > 0 {
				select {
				case <-time.After(time.Duration(in.MS) * time.Millisecond):
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				}
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{
				Message: in.Message,
				RequestedSchema: map[string]any{"type": "object", "required": []string{"name"},
					"properties": map[string]any{
						"name":   map[string]any{"type": "string", "description": "your name"},
						"age":    map[string]any{"type": "integer", "title": "Age", "minimum": 0, "maximum": 150},
						"colour": map[string]any{"type": "string", "title": "Favourite colour", "enum": []string{"red", "green", "blue"}},
					}},
			}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sample", Description: "Asks the client's model to answer the message (sampling) and returns its text"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, any, error) {
			if r, ok := req.Params.InputResponses["answer"].(*mcp.CreateMessageWithToolsResult); ok {
				var b strings.Builder
				for _, c := range r.Content {
					if t, ok := c.(*mcp.TextContent); ok {
						b.WriteString(t.Text)
					}
				}
				return text(fmt.Sprintf("%s said: %s", r.Model, b.String())), nil, nil
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"answer": &mcp.CreateMessageParams{
				MaxTokens: 100,
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Message}}},
			}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "roots", Description: "Lists the client's roots"},
		func(ctx context.Context, req *mcp.CallToolRequest, in Empty) (*mcp.CallToolResult, any, error) {
			if r, ok := req.Params.InputResponses["roots"].(*mcp.ListRootsResult); ok {
				var uris []string
				for _, root := range r.Roots {
					uris = append(uris, root.URI)
				}
				return text(strings.Join(uris, "\n")), nil, nil
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}}, nil, nil
		})
}
