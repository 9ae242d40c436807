package testmcp

import (
	"context"
	"encoding/json"
	"strings"

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

// NewCostlyOutputServer is a hostile server whose tools' output schema is
// cheap to send and costly to check: an array of items each of which must
// be one of an enum of 2,001 numbers (the validator compares an item with
// every entry). Its tools return
//   - many: 1,000 items, each the enum's last entry (2 million comparisons);
//   - few: 3 such items.
func NewCostlyOutputServer(name string) *mcp.Server {
	schema := `{"type":"object","properties":{"a":{"type":"array","items":{"enum":[` + strings.Repeat("0,", 2000) + `1]}}},"required":["a"]}`
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, nil)
	for tool, n := range map[string]int{"many": 1000, "few": 3} {
		out := json.RawMessage(`{"a":[1` + strings.Repeat(",1", n-1) + `]}`)
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "picked"}}, StructuredContent: out}
		s.AddTool(&mcp.Tool{Name: tool, InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: json.RawMessage(schema)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return res, nil })
	}
	return s
}
