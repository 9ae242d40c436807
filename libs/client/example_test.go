package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Each example starts its own bus: NATS and a runner serving the test MCP
// server (libs/testmcp) as the server "demo". An agent is given the NATS URL.

// Connect to the bus and list the tools of the running servers. Each tool has
// a namespaced name (<server>__<tool>), the name to show an LLM, and the
// subject it is called on.
func Example() {
	demo := startExampleBus() // NATS, and a runner serving the test MCP server as "demo"
	defer demo.Stop()

	nc, err := nats.Connect(demo.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.New(nc, client.Options{}) // the default prefix, mcp.v1

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tools, err := c.ListTools(ctx, "") // "" for every server
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range tools {
		fmt.Println(t.Name, t.Subject)
	}
	// Output:
	// demo__add_prompt mcp.v1.call.demo.add_prompt
	// demo__add_tool mcp.v1.call.demo.add_tool
	// demo__ask mcp.v1.call.demo.ask
	// demo__crash mcp.v1.call.demo.crash
	// demo__echo mcp.v1.call.demo.echo
	// demo__env mcp.v1.call.demo.env
	// demo__env_sha256 mcp.v1.call.demo.env_sha256
	// demo__fail mcp.v1.call.demo.fail
	// demo__large mcp.v1.call.demo.large
	// demo__meta mcp.v1.call.demo.meta
	// demo__progress mcp.v1.call.demo.progress
	// demo__roots mcp.v1.call.demo.roots
	// demo__sample mcp.v1.call.demo.sample
	// demo__sleep mcp.v1.call.demo.sleep
	// demo__sleep_idempotent mcp.v1.call.demo.sleep_idempotent
	// demo__touch_resource mcp.v1.call.demo.touch_resource
}

// Call a tool by the namespaced name an LLM chose. The result is the MCP
// CallToolResult as JSON, which go-sdk's type decodes.
func ExampleClient_CallNamed() {
	demo := startExampleBus()
	defer demo.Stop()
	nc, err := nats.Connect(demo.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.New(nc, client.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := c.CallNamed(ctx, "demo__echo", json.RawMessage(`{"message":"hello over NATS"}`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("isError:", res.IsError)
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// isError: false
	// hello over NATS
}

// Call a tool by server and original tool name, and receive the MCP progress
// notifications it sends before its result. Every notification is delivered
// before Call returns.
func ExampleClient_Call() {
	demo := startExampleBus()
	defer demo.Stop()
	nc, err := nats.Connect(demo.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.New(nc, client.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := c.Call(ctx, "demo", "progress", json.RawMessage(`{"steps":3}`), &client.CallOptions{
		OnProgress: func(p model.ProgressEvent) {
			fmt.Printf("%s (%g/%g)\n", p.Message, p.Progress, p.Total)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// step 1 (1/3)
	// step 2 (2/3)
	// step 3 (3/3)
	// done 3 steps
}

// A tool that fails answers with a result whose isError is set; the call
// itself succeeded. A call the bus cannot deliver fails with an
// *apierr.Error, whose code tells why.
func ExampleClient_Call_errors() {
	demo := startExampleBus()
	defer demo.Stop()
	nc, err := nats.Connect(demo.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.New(nc, client.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := c.Call(ctx, "demo", "fail", json.RawMessage(`{"message":"disk full"}`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("isError:", res.IsError, "-", res.Content[0].(*mcp.TextContent).Text)

	_, err = c.Call(ctx, "nowhere", "echo", nil, nil)
	fmt.Println(apierr.Of(err), "-", apierr.From(err).Message)
	_, err = c.CallNamed(ctx, "echo", nil, nil)
	fmt.Println(apierr.Of(err), "-", apierr.From(err).Message)
	// Output:
	// isError: true - failed: disk full
	// NOT_FOUND - server nowhere not found or not running
	// VALIDATION_ERROR - a namespaced tool name looks like <server>__<tool>
}

// Send an MCP method other than a tool call, here resources/read, and decode
// its result.
func ExampleClient_RPC() {
	demo := startExampleBus()
	defer demo.Stop()
	nc, err := nats.Connect(demo.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.New(nc, client.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var res mcp.ReadResourceResult
	if err := c.RPC(ctx, "demo", "resources/read", mcp.ReadResourceParams{URI: "test://greeting"}, &res); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Contents[0].Text)
	// Output:
	// hello from demo
}

// Ask for the status of every server, and for the runners that run them.
func ExampleClient_Status() {
	demo := startExampleBus()
	defer demo.Stop()
	nc, err := nats.Connect(demo.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.New(nc, client.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	statuses, err := c.Status(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, st := range statuses {
		fmt.Println(st.Server, st.State, "on", st.Runner, "with", len(st.Tools), "tools")
	}
	runners, err := c.Runners(ctx, 0) // 0: wait the default 300ms for runners to answer
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range runners {
		fmt.Println("runner", r.ID, "runs", r.Servers)
	}
	// Output:
	// demo running on r1 with 16 tools
	// runner r1 runs [demo]
}

// Follow the event stream: status changes and the audit record of every call.
// With replay, stored events come first; FollowEvents returns once ctx ends.
func ExampleClient_FollowEvents() {
	demo := startExampleBus()
	defer demo.Stop()
	nc, err := nats.Connect(demo.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c := client.New(nc, client.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.CallNamed(ctx, "demo__echo", json.RawMessage(`{"message":"hi"}`), nil); err != nil {
		fmt.Println(err)
		return
	}

	follow, stop := context.WithCancel(ctx)
	defer stop()
	seen := 0
	err = c.FollowEvents(follow, "", true, func(ev client.Event) {
		switch ev.Kind {
		case "status":
			var st model.Status
			_ = json.Unmarshal(ev.Data, &st)
			fmt.Println(ev.Subject, "-", st.State)
		case "call":
			var call model.CallEvent
			_ = json.Unmarshal(ev.Data, &call)
			fmt.Println(ev.Subject, "-", call.Tool, call.Outcome)
		}
		if seen++; seen == 2 {
			stop() // enough: FollowEvents returns
		}
	})
	if err != nil {
		fmt.Println(err)
	}
	if seen < 2 {
		fmt.Println("saw", seen, "events before", ctx.Err())
	}
	// Output:
	// mcp.v1.events.status.demo - running
	// mcp.v1.events.call.demo - echo ok
}
