package runner_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// Under strict, a tool that appears after the review is withheld from the
// moment the runner takes the new list: it took the list first and checked
// it against the pins after (one pin read per tool), so for that time a
// caller naming the new tool (an agent on the bus needs no list) ran it
// unreviewed. A server of 2,000 tools makes the check take long enough to
// be seen.
func TestStrictNewToolNeverRunsBeforeItsCheck(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	s := mcp.NewServer(&mcp.Implementation{Name: "wide", Version: "1"}, nil)
	ran := func(name string) mcp.ToolHandler {
		return func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + name}}}, nil
		}
	}
	for i := range 2000 {
		name := "t" + strconv.Itoa(i)
		s.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, ran(name))
	}
	url := testmcp.ServeServerHTTP(t, s, nil, nil)
	e.Put(t, model.McpConfig{Name: "wide", Enabled: true, Pin: model.PinStrict, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "wide", model.StateRunning, 60*time.Second)
	if _, err := call(t, e, "wide", "t0", `{}`); err != nil {
		t.Fatal(err)
	}
	s.AddTool(&mcp.Tool{Name: "injected", InputSchema: json.RawMessage(`{"type":"object"}`)}, ran("injected")) // list_changed
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, err := call(t, e, "wide", "injected", `{}`)
		if err == nil && strings.Contains(string(raw), "ran injected") {
			t.Fatalf("the new tool ran before its review: %s", raw)
		}
		if err == nil && strings.Contains(string(raw), "withheld") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new tool was never withheld: %s %v", raw, err)
		}
	}
}
