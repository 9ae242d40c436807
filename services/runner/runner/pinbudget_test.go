package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server that renames its tools in a loop writes pins and tool_changed
// events (each also an audit record) only up to its budget: past it, new
// tools are withheld under strict, unpinned and unannounced.
func TestPinBudget(t *testing.T) {
	opts := quickOpts()
	opts.PinBudget = 5
	e := runnertest.Start(t, opts)
	events := testkit.Count(t, e.NC, "mcp.v1.events.tool_changed.churn")

	s := mcp.NewServer(&mcp.Implementation{Name: "churn", Version: "1"}, nil)
	add := func(name string) {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "tool " + name}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
		})
	}
	for i := range 3 {
		add(fmt.Sprintf("t%d", i))
	}
	url := testmcp.ServeServerHTTP(t, s, nil, nil)
	cfg := e.Put(t, model.McpConfig{Name: "churn", Enabled: true, Pin: model.PinStrict, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "churn", model.StateRunning, 10*time.Second)
	// 3 first seen and pinned; 6 renamed in: 2 more fit the budget.
	for i := range 6 {
		add(fmt.Sprintf("renamed%d", i))
	}
	js, err := jetstream.New(e.NC)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bus.BucketPins)
	if err != nil {
		t.Fatal(err)
	}
	var why []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		why = why[:0]
		for _, tool := range []string{"renamed0", "renamed1", "renamed2", "renamed3", "renamed4", "renamed5"} {
			res, err := e.Client.Call(context.Background(), "churn", tool, json.RawMessage(`{}`), nil)
			if err == nil && strings.Contains(string(res), "faster than mcpbus records them") {
				why = append(why, tool)
			}
		}
		if len(why) == 4 {
			break
		}
	}
	if len(why) != 4 {
		t.Fatalf("tools withheld past the budget: %v, want 4 of the 6 renamed ones", why)
	}
	keys, err := kv.ListKeysFiltered(context.Background(), cfg.ID+".>")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if seen := events.Settled(t); n > 5 || seen > 5 {
		t.Fatalf("%d pins and %d tool_changed events with a budget of 5", n, seen)
	}
}
