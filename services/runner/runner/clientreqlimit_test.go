package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// flooding is a remote server whose tool "flood" makes n elicitation
// requests of its client during the call (all at once, or one after the
// other) and says how many were answered and how many refused.
func flooding(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "flood", Version: "1"}, nil)
	type in struct {
		N        int  `json:"n"`
		Parallel bool `json:"parallel,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "flood"}, func(ctx context.Context, req *mcp.CallToolRequest, args in) (*mcp.CallToolResult, any, error) {
		var answered, refused atomic.Int32
		ask := func() {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the test's end does not wait for more
			defer cancel()
			_, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "?", RequestedSchema: &jsonschema.Schema{Type: "object",
				Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}}})
			if err != nil {
				refused.Add(1)
			} else {
				answered.Add(1)
			}
		}
		var wg sync.WaitGroup
		for range args.N {
			if args.Parallel {
				wg.Go(ask)
			} else {
				ask()
			}
		}
		wg.Wait()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("answered=%d refused=%d", answered.Load(), refused.Load())}}}, nil, nil
	})
	return testmcp.ServeServerHTTP(t, s, nil, nil)
}

// startFlooding runs flooding as the server "flood".
func startFlooding(t *testing.T) *runnertest.Env {
	t.Helper()
	e := runnertest.Start(t, quickOpts())
	url := flooding(t)
	e.Put(t, model.McpConfig{Name: "flood", Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "flood", model.StateRunning, 10*time.Second)
	return e
}

// A server may not flood its caller with requests during one call: at most
// 4 in flight, 256 in all; past them the server is refused and the call
// goes on.
func TestClientRequestsOfACallBounded(t *testing.T) {
	e := startFlooding(t)
	var inFlight, peak atomic.Int32
	answer := &client.CallOptions{OnClientRequest: func(ctx context.Context, req model.ClientRequest) (any, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(50 * time.Millisecond) // a person reading
		return &mcp.ElicitResult{Action: "decline"}, nil
	}}
	call := func(args string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := e.Client.Call(ctx, "flood", "flood", json.RawMessage(args), answer)
		if err != nil {
			t.Fatal(err)
		}
		return string(res)
	}
	if out := call(`{"n":40,"parallel":true}`); !strings.Contains(out, "refused=") || strings.Contains(out, "refused=0") {
		t.Fatalf("40 requests at once: %s, want some refused", out)
	}
	if peak.Load() > 4 {
		t.Fatalf("the caller held %d of one call's requests at once, want at most 4", peak.Load())
	}
	answer.OnClientRequest = func(context.Context, model.ClientRequest) (any, error) {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	if out := call(`{"n":300}`); !strings.Contains(out, "answered=256 refused=44") {
		t.Fatalf("300 requests one after the other: %s, want 256 answered", out)
	}
}

// Stopping a remote server whose call waits for a person's answer to an
// elicitation does not wait for the person: the relay ends with the
// session, and the stop takes no longer than a stop does.
func TestStopDoesNotWaitForAPerson(t *testing.T) {
	e := startFlooding(t)
	asked := make(chan struct{}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		_, _ = e.Client.Call(ctx, "flood", "flood", json.RawMessage(`{"n":1}`), &client.CallOptions{
			OnClientRequest: func(ctx context.Context, _ model.ClientRequest) (any, error) {
				asked <- struct{}{}
				<-ctx.Done() // a person who has not answered yet
				return nil, ctx.Err()
			}})
	}()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's elicitation never reached the caller")
	}
	start := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if _, err := e.Client.Runtime(sctx, "stop", "flood"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// StopTimeout is 2 s: the relay ends at once; a session the upstream
	// holds open is closed under it after that, and left after twice that
	// (the person would have held it 10 s).
	if took := time.Since(start); took > 6500*time.Millisecond {
		t.Fatalf("the stop took %s, waiting for the person", took)
	} else {
		t.Logf("the stop took %s", took)
	}
}
