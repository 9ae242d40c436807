package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

type found struct {
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
}

func searchTools(t *testing.T, c *client, query string) []string {
	t.Helper()
	res, err := call(t, c, mcpserver.SearchToolsName, map[string]any{"query": query, "limit": 5})
	if err != nil || res.IsError {
		t.Fatalf("search_tools %q: %v %v", query, err, res)
	}
	var f found
	if err := json.Unmarshal([]byte(textOf(t, res)), &f); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range f.Tools {
		if len(tool.InputSchema) == 0 || tool.Description == "" {
			t.Errorf("search_tools gave an incomplete definition: %+v", tool)
		}
		names = append(names, tool.Name)
	}
	return names
}

// /mcp?tools=search: clients of both eras see search_tools and call_tool
// only; search finds only the key's tools, call_tool runs them as the tools
// themselves (schema checks included), and a catalog change sends no
// tools/list_changed.
func TestSearchMode(t *testing.T) {
	principals := map[string]*auth.Principal{
		"narrow": {KeyID: "k-narrow", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Allow: []string{"alpha__*"}}},
		"full":   {KeyID: "k-full", Scopes: []string{auth.ScopeCall}},
	}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)
	e.addServer(t, "beta", nil)

	for _, era := range []string{"2025-11-25", ""} { // "": go-sdk's newest, 2026-07-28, no session
		c := connect(t, e.url+"?tools=search", "narrow", &mcp.ClientSessionOptions{ProtocolVersion: era})
		if got := slices.Sorted(mapsKeys(tools(t, c))); !slices.Equal(got, []string{mcpserver.CallToolName, mcpserver.SearchToolsName}) {
			t.Fatalf("era %q: search mode lists %v", era, got)
		}
		names := searchTools(t, c, "environment variable")
		if len(names) == 0 || names[0] != "alpha__env" || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "beta__") }) {
			t.Fatalf("era %q: search for an environment variable found %v (want alpha__env first, no beta tool)", era, names)
		}
		res, err := call(t, c, mcpserver.CallToolName, map[string]any{"name": "alpha__echo", "arguments": map[string]any{"message": "via call_tool"}})
		if err != nil || textOf(t, res) != "via call_tool" {
			t.Fatalf("era %q: call_tool alpha__echo: %v %v", era, err, res)
		}
		res, err = call(t, c, mcpserver.CallToolName, map[string]any{"name": "alpha__echo", "arguments": map[string]any{"message": 7}})
		wantMismatch(t, res, err, "alpha__echo")
		_, err = call(t, c, mcpserver.CallToolName, map[string]any{"name": "beta__echo", "arguments": map[string]any{"message": "x"}})
		if w := wantRPCError(t, err, jsonrpc.CodeInvalidParams); !strings.Contains(w.Message, "unknown tool") {
			t.Fatalf("era %q: another key's tool refused with %q", era, w.Message)
		}
		_, err = call(t, c, "alpha__echo", map[string]any{"message": "direct"})
		wantRPCError(t, err, jsonrpc.CodeInvalidParams) // only the two tools exist here
		_, err = call(t, c, mcpserver.SearchToolsName, map[string]any{"query": "  "})
		wantRPCError(t, err, jsonrpc.CodeInvalidParams)
	}

	// A session of search mode is not one of the full list (and back).
	c := connect(t, e.url+"?tools=search", "full", nil)
	if names := searchTools(t, c, "echo"); !slices.Contains(names, "beta__echo") || !slices.Contains(names, "alpha__echo") {
		t.Fatalf("the full key's search for echo: %v", names)
	}
	if r := raw(t, e.url, "full", c.ID(), `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`); r.status != 404 {
		t.Fatalf("a search-mode session used without ?tools=search: %d %s", r.status, r.body)
	}
	if r := raw(t, e.url+"?tools=everything", "full", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); r.status != 400 {
		t.Fatalf("?tools=everything: %d %s", r.status, r.body)
	}

	// A new server's tools are found at once, and the session is not told.
	e.addServer(t, "gamma", nil)
	select {
	case <-c.listChanged:
		t.Fatal("search mode got tools/list_changed")
	case <-time.After(300 * time.Millisecond):
	}
	if names := searchTools(t, c, "echo"); !slices.Contains(names, "gamma__echo") {
		t.Fatalf("gamma__echo not found after gamma started: %v", names)
	}
}

// A key whose tools_mode is search gets search mode on plain /mcp and on
// Serve (serve-stdio), with its pinned tools listed beside the two (those
// its filter allows); a catalog change outside its pins sends it no
// tools/list_changed while a full-list session is told, and a pinned
// tool's arrival is announced.
func TestKeySearchModeAndPins(t *testing.T) {
	pinned := &auth.Principal{KeyID: "k-pinned", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Deny: []string{"beta__*"}},
		ToolsMode: model.KeyToolsModeSearch, PinnedTools: []string{"alpha__echo", "beta__echo", "gamma__echo"}}
	principals := map[string]*auth.Principal{"pinned": pinned, "full": {KeyID: "k-full", Scopes: []string{auth.ScopeCall}}}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)
	e.addServer(t, "beta", nil)

	want := []string{"alpha__echo", mcpserver.CallToolName, mcpserver.SearchToolsName}
	c := connect(t, e.url, "pinned", nil)
	if got := slices.Sorted(mapsKeys(tools(t, c))); !slices.Equal(got, want) {
		t.Fatalf("the search-mode key lists %v, want %v", got, want)
	}
	if res, err := call(t, c, "alpha__echo", map[string]any{"message": "pinned"}); err != nil || textOf(t, res) != "pinned" {
		t.Fatalf("calling the pinned tool: %v %v", err, res)
	}
	if names := searchTools(t, c, "echo"); !slices.Contains(names, "alpha__echo") || slices.Contains(names, "beta__echo") {
		t.Fatalf("the key's search for echo: %v", names)
	}

	// serve-stdio with the same principal: the same tools.
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.agg.Serve(ctx, pinned, &mcp.IOTransport{Reader: c2sR, Writer: s2cW}) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-client", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: s2cR, Writer: c2sW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	res, err := cs.ListTools(lctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stdio []string
	for _, tl := range res.Tools {
		stdio = append(stdio, tl.Name)
	}
	if slices.Sort(stdio); !slices.Equal(stdio, want) {
		t.Fatalf("Serve in search mode lists %v, want %v", stdio, want)
	}

	// An unpinned server: the full-list session is told, the search-mode one not.
	full := connect(t, e.url, "full", nil)
	e.addServer(t, "delta", nil)
	waitListChanged(t, full, "adding server delta")
	select {
	case <-c.listChanged:
		t.Fatal("search mode got tools/list_changed for tools it does not list")
	case <-time.After(300 * time.Millisecond):
	}
	// A pinned tool arrives: announced and listed.
	e.addServer(t, "gamma", nil)
	waitListChanged(t, c, "a pinned tool arriving")
	want = []string{"alpha__echo", mcpserver.CallToolName, "gamma__echo", mcpserver.SearchToolsName}
	if got := slices.Sorted(mapsKeys(tools(t, c))); !slices.Equal(got, want) {
		t.Fatalf("after gamma the key lists %v, want %v", got, want)
	}
}
