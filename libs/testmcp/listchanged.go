package testmcp

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewListChangedStormServer is a hostile server that sends
// notifications/tools/list_changed every interval until ctx ends, its tool
// list (one tool, echo) unchanged: go-sdk tells every session when a tool
// is added again. A client that re-lists on each notice and republishes
// what it read writes as often as the server likes. add, when not nil,
// receives tools to add for real (a genuine change amid the storm).
func NewListChangedStormServer(ctx context.Context, name string, interval time.Duration, add <-chan *mcp.Tool) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, nil)
	echo := &mcp.Tool{Name: "echo", Description: "Echoes its message"}
	handler := func(ctx context.Context, req *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, any, error) {
		return text(in.Message), nil, nil
	}
	mcp.AddTool(s, echo, handler)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case t := <-add:
				mcp.AddTool(s, t, handler)
			case <-tick.C:
				mcp.AddTool(s, echo, handler) // the same tool again: a notice, no change
			}
		}
	}()
	return s
}
