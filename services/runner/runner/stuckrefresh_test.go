package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server that announces tools/list_changed and then never answers the
// tools/list it asks for holds the re-read for the runner's call timeout,
// on the server's goroutine. A stop asked for meanwhile ends that re-read at
// once; before, it waited behind it (20 s here, 30 s by default, longer
// than `mcpbus stop` waits with a raised --call-timeout).
func TestStopEndsAToolListReadThatHangs(t *testing.T) {
	var stuck atomic.Bool
	s := mcp.NewServer(&mcp.Implementation{Name: "stuck", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "change"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		stuck.Store(true)
		mcp.AddTool(s, &mcp.Tool{Name: "new"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "changed"}}}, nil, nil
	})
	listAsked, release := make(chan struct{}, 1), make(chan struct{})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" && stuck.Load() {
				select {
				case listAsked <- struct{}{}:
				default:
				}
				select { // never answers (until the test ends)
				case <-ctx.Done():
				case <-release:
				}
				return nil, context.Canceled
			}
			return next(ctx, method, req)
		}
	})
	url := testmcp.ServeServerHTTP(t, s, nil, nil)
	t.Cleanup(func() { close(release) }) // before the server's close
	opts := quickOpts()
	opts.CallTimeout = 20 * time.Second
	// The session's close waits for the server (its stuck request) up to
	// twice this (closeRemote): short, so the bound below has room.
	opts.StopTimeout = 500 * time.Millisecond
	e := runnertest.Start(t, opts)
	e.Put(t, model.McpConfig{Name: "stuck", Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "stuck", model.StateRunning, 10*time.Second)
	if _, err := call(t, e, "stuck", "change", `{}`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-listAsked:
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not re-read the tool list after list_changed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	began := time.Now()
	st, err := e.Client.Runtime(ctx, "stop", "stuck")
	took := time.Since(began)
	if err != nil {
		t.Fatalf("stop after %s: %v", took, err)
	}
	if took > 5*time.Second {
		t.Fatalf("the stop waited %s behind a tool list re-read that hangs", took)
	}
	if st.State != model.StateStopped {
		t.Fatalf("status after the stop: %+v", st)
	}
	t.Logf("stopped in %s", took)
}
