package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
)

// Search mode (/mcp?tools=search): a client offered thousands of tools
// sees two, search_tools (query -> the best tools with their full
// definitions) and call_tool (name + arguments, run as the tool itself
// would be). Its tool list never changes, so it gets no
// tools/list_changed however the catalog moves.

// Names of the two tools of a search-mode view.
const (
	SearchToolsName = "search_tools"
	CallToolName    = "call_tool"
)

// searchLimitMax bounds search_tools' limit: each hit carries a full schema.
const searchLimitMax = 50

var searchToolsTool = &mcp.Tool{
	Name:  SearchToolsName,
	Title: "Search tools",
	Description: "Finds the tools that best match a query (words of what you want to do), best first, " +
		"each with its name, description and inputSchema. Call a found tool with call_tool.",
	InputSchema: json.RawMessage(`{"type":"object","required":["query"],"additionalProperties":false,"properties":{` +
		`"query":{"type":"string","minLength":1,"maxLength":1000,"description":"what you want to do, in words"},` +
		`"limit":{"type":"integer","minimum":1,"maximum":50,"description":"the most tools to return (default 10)"}}}`),
	Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
}

var callToolTool = &mcp.Tool{
	Name:  CallToolName,
	Title: "Call a tool",
	Description: "Calls a tool that search_tools found, by its name, with arguments that follow its inputSchema. " +
		"The result is the tool's own.",
	InputSchema: json.RawMessage(`{"type":"object","required":["name"],"additionalProperties":false,"properties":{` +
		`"name":{"type":"string","description":"the tool's name, as search_tools gave it"},` +
		`"arguments":{"type":"object","description":"the tool's arguments"}}}`),
}

// indexTools re-indexes the servers whose exposed tools changed; a.mu is
// held. The stamp is the exposed names and catalog entries, so a rename
// forced by another server's clash re-indexes too.
func (a *Aggregator) indexTools() {
	byServer := map[string][]*toolEntry{}
	for _, e := range a.tools {
		byServer[e.cat.Server] = append(byServer[e.cat.Server], e)
	}
	a.search.Retain(func(srv string) bool { return byServer[srv] != nil })
	for srv, entries := range byServer {
		sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
		var stamp strings.Builder
		tools := make([]model.Tool, 0, len(entries))
		for _, e := range entries {
			stamp.WriteString(e.name)
			stamp.Write(e.raw)
			t := e.cat
			t.Name = e.name
			tools = append(tools, t)
		}
		a.search.SetServer(srv, stamp.String(), tools)
	}
}

// installSearchTools gives a search-mode view its two tools; a.mu is held.
func (a *Aggregator) installSearchTools(v *view) {
	v.server.AddTool(searchToolsTool, a.searchToolsHandler(v))
	v.server.AddTool(callToolTool, a.callToolHandler(v))
}

// foundTool is one search_tools hit: what tools/list would say of it.
type foundTool struct {
	Name        string           `json:"name"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	InputSchema json.RawMessage  `json:"inputSchema"`
	Annotations *json.RawMessage `json:"annotations,omitempty"`
}

func (a *Aggregator) searchToolsHandler(v *view) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct {
			Query string `json:"query"`
			Limit int    `json:"limit"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("arguments", "arguments must be {\"query\", \"limit\"}"))
		}
		if in.Limit > searchLimitMax {
			in.Limit = searchLimitMax
		}
		q := model.ToolsSearchRequest{Query: in.Query, Limit: in.Limit}
		if err := toolsearch.Check(&q); err != nil {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.From(err))
		}
		a.mu.Lock()
		hits := a.search.Search(q.Query, q.Limit, func(t *model.Tool) bool {
			e := a.tools[t.Name]
			return e != nil && !e.unservable && v.principal.AllowsTool(e.names()...)
		})
		out := struct {
			Tools []foundTool `json:"tools"`
		}{Tools: make([]foundTool, 0, len(hits))}
		for _, h := range hits {
			e := a.tools[h.Tool.Name]
			f := foundTool{Name: e.name, Title: e.tool.Title, Description: e.tool.Description}
			f.InputSchema, _ = json.Marshal(e.tool.InputSchema)
			if e.tool.Annotations != nil {
				raw, _ := json.Marshal(e.tool.Annotations)
				f.Annotations = (*json.RawMessage)(&raw)
			}
			out.Tools = append(out.Tools, f)
		}
		a.mu.Unlock()
		text, _ := json.Marshal(out)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}, StructuredContent: out}, nil
	}
}

func (a *Aggregator) callToolHandler(v *view) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Name == "" {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("name", "arguments must be {\"name\", \"arguments\"}"))
		}
		a.mu.Lock()
		e := a.tools[in.Name]
		a.mu.Unlock()
		if e == nil || e.unservable || !v.principal.AllowsTool(e.names()...) {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("name", fmt.Sprintf("unknown tool %q (search_tools lists the tools you may call)", in.Name)))
		}
		inner := *req.Params
		inner.Name, inner.Arguments = e.name, in.Arguments
		return a.toolHandler(v, e)(ctx, &mcp.CallToolRequest{Session: req.Session, Params: &inner, Extra: req.Extra})
	}
}
