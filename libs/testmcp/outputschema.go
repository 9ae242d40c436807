package testmcp

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CountSchema is the output schema every tool of NewOutputSchemaServer
// declares: an object with an integer n.
const CountSchema = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`

// NewOutputSchemaServer is a server whose tools all declare CountSchema as
// their output schema (MCP: their structuredContent MUST conform) and
// return:
//   - count: {"n":1}, as declared;
//   - miscount: {"n":"one"}, which does not conform;
//   - uncounted: text alone, no structuredContent;
//   - failed: an isError result with {"n":"one"}.
func NewOutputSchemaServer(name string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, nil)
	for tool, res := range map[string]*mcp.CallToolResult{
		"count":     {Content: []mcp.Content{&mcp.TextContent{Text: `{"n":1}`}}, StructuredContent: json.RawMessage(`{"n":1}`)},
		"miscount":  {Content: []mcp.Content{&mcp.TextContent{Text: `{"n":"one"}`}}, StructuredContent: json.RawMessage(`{"n":"one"}`)},
		"uncounted": {Content: []mcp.Content{&mcp.TextContent{Text: "one"}}},
		"failed":    {Content: []mcp.Content{&mcp.TextContent{Text: "could not count"}}, StructuredContent: json.RawMessage(`{"n":"one"}`), IsError: true},
	} {
		s.AddTool(&mcp.Tool{Name: tool, InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: json.RawMessage(CountSchema)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return res, nil })
	}
	return s
}
