package mcpserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server just started has its catalog in KV mcp_tools before this
// gateway's watch brings it in. A tools/call made then, by a client of
// either era, on the fast path or through go-sdk (a progress token), waits
// for the watch instead of being told the tool does not exist. A tool that
// is not in the bucket is still unknown at once.
func TestCallRightAfterStartWaitsForTheCatalog(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	session := connect(t, e.url, "", nil)
	modern := connect(t, e.url, "", &mcp.ClientSessionOptions{})

	release := e.agg.HoldCatalogs()
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	e.Put(t, runnertest.Binary("beta", testServer, "-name", "beta"))
	e.WaitState(t, "beta", model.StateRunning, 30*time.Second)
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := e.Assets.Tools.Get(ctx, "beta")
		return err == nil, "beta's catalog is not in KV mcp_tools"
	})
	if e.agg.Knows("beta__echo") {
		t.Fatal("the held watch installed beta's catalog")
	}

	type outcome struct {
		name string
		res  *mcp.CallToolResult
		err  error
	}
	done := make(chan outcome, 3)
	for _, c := range []struct {
		name string
		c    *client
		meta mcp.Meta
	}{{"2025-11-25 session", session, nil}, {"2026-07-28", modern, nil}, {"with a progress token (go-sdk)", session, mcp.Meta{"progressToken": "p-1"}}} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := c.c.CallTool(ctx, &mcp.CallToolParams{Name: "beta__echo", Arguments: map[string]any{"message": "just started"}, Meta: c.meta})
			done <- outcome{c.name, res, err}
		}()
	}
	select {
	case o := <-done:
		t.Fatalf("%s: answered before the watch brought the catalog: %+v, %v", o.name, o.res, o.err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	released = true
	for range 3 {
		o := <-done
		if o.err != nil {
			t.Fatalf("%s: %v", o.name, o.err)
		}
		if o.res.IsError || textOf(t, o.res) != "just started" {
			t.Fatalf("%s: %+v", o.name, o.res)
		}
	}

	// Not in the bucket: unknown, without waiting out the catch-up bound.
	for _, name := range []string{"beta__nope", "gamma__echo", "no-namespace"} {
		start := time.Now()
		_, err := call(t, session, name, map[string]any{})
		wantRPCError(t, err, jsonrpc.CodeInvalidParams)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("%s: unknown after %v", name, took)
		}
	}
}
