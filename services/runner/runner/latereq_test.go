package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// lateServer is a shared HTTP server of protocol 2025-11-25 (its requests
// name no call) whose tool slow, once cancelled, goes on and asks for input
// for its caller when release closes; late gets what that request came to.
// wait waits 3 s; ask asks for input during its own call.
type lateServer struct {
	release chan struct{}
	late    chan string // the answer's action, or the error
}

func startLateServer(t *testing.T, e *runnertest.Env, callTimeout time.Duration) *lateServer {
	t.Helper()
	ls := &lateServer{release: make(chan struct{}), late: make(chan string, 1)}
	s := mcp.NewServer(&mcp.Implementation{Name: "late", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	type in struct {
		Who string `json:"who"`
	}
	schema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}}
	mcp.AddTool(s, &mcp.Tool{Name: "slow"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		go func() { // work the cancellation does not stop
			<-ls.release
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "delete the files of " + a.Who + "?", RequestedSchema: schema})
			if err != nil {
				ls.late <- err.Error()
				return
			}
			ls.late <- res.Action
		}()
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "waited"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "may I, " + a.Who + "?", RequestedSchema: schema})
		if err != nil {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refused: " + err.Error()}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action}}}, nil, nil
	})
	url := testmcp.ServeServerHTTP(t, s, nil, nil)
	e.Put(t, model.McpConfig{Name: "late", Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url},
		Runtime:   model.Runtime{Eager: true, CallTimeout: model.Duration(callTimeout)}})
	e.WaitState(t, "late", model.StateRunning, 10*time.Second)
	t.Cleanup(func() {
		select {
		case <-ls.release:
		default:
			close(ls.release)
		}
	})
	return ls
}

// asks answers every request of the server with accept, recording its params.
type asks struct {
	mu  sync.Mutex
	got []string
}

func (a *asks) opts() *client.CallOptions {
	return &client.CallOptions{OnClientRequest: func(_ context.Context, r model.ClientRequest) (any, error) {
		a.mu.Lock()
		a.got = append(a.got, string(r.Params))
		a.mu.Unlock()
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
	}}
}

func (a *asks) seen() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.got, "\n")
}

func as(who string) context.Context {
	return principal.With(context.Background(), principal.Key(who, false, model.ToolFilter{}))
}

// giveUp calls slow as who and gives the call up after a moment: the server
// goes on with it.
func giveUp(t *testing.T, e *runnertest.Env, who string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(as(who), 500*time.Millisecond)
	defer cancel()
	_, err := e.Client.Call(ctx, "late", "slow", json.RawMessage(`{"who":"`+who+`"}`), (&asks{}).opts())
	if err == nil {
		t.Fatalf("%s's slow call succeeded, want it given up", who)
	}
	time.Sleep(200 * time.Millisecond) // the runner learns of the cancellation
}

// lateWhile calls wait as who, lets the server send its late request
// meanwhile, and returns what the server's request came to.
func (ls *lateServer) lateWhile(t *testing.T, e *runnertest.Env, who string, a *asks) string {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(as(who), 20*time.Second)
		defer cancel()
		_, err := e.Client.Call(ctx, "late", "wait", json.RawMessage(`{"who":"`+who+`"}`), a.opts())
		done <- err
	}()
	time.Sleep(500 * time.Millisecond) // who's call is the session's only one
	close(ls.release)
	var late string
	select {
	case late = <-ls.late:
	case <-time.After(15 * time.Second):
		t.Fatal("the server's late request came to nothing")
	}
	if err := <-done; err != nil {
		t.Fatalf("%s's call: %v", who, err)
	}
	return late
}

func refusedSums(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "mcpbus.runner.client_requests.refused" {
				continue
			}
			for _, dp := range sum.DataPoints {
				reason, _ := dp.Attributes.Value("reason")
				sums[reason.AsString()] += dp.Value
			}
		}
	}
	return sums
}

// A shared server's request for alice's call, sent after she gave the call
// up (the server went on), never reaches bob's call, though bob's is then
// the session's only one: it is refused, counted as in_doubt.
func TestLateRequestNeverReachesAnotherPrincipal(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetMeterProvider(mp) // before the runner makes its instruments
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	e := runnertest.Start(t, quickOpts())
	ls := startLateServer(t, e, time.Minute)
	giveUp(t, e, "alice")
	var bob asks
	late := ls.lateWhile(t, e, "bob", &bob)
	if strings.Contains(bob.seen(), "alice") {
		t.Fatalf("bob's caller got (and answered) alice's request: %s", bob.seen())
	}
	if !strings.Contains(late, "ended before it was answered") {
		t.Fatalf("the late request came to %q, want it refused as maybe another call's", late)
	}
	if sums := refusedSums(t, reader); sums["in_doubt"] != 1 {
		t.Fatalf("refused requests by reason = %v, want in_doubt 1", sums)
	}
}

// Alice's own next call gets the late request of hers: it is her principal's.
func TestLateRequestReachesItsOwnPrincipal(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	ls := startLateServer(t, e, time.Minute)
	giveUp(t, e, "alice")
	var alice asks
	late := ls.lateWhile(t, e, "alice", &alice)
	if !strings.Contains(alice.seen(), "delete the files of alice?") || late != "accept" {
		t.Fatalf("alice's next call saw %q and the late request came to %q, want alice asked and her accept", alice.seen(), late)
	}
}

// The doubt lasts the server's call timeout from the end of the call given
// up: bob's own request is refused within it, and relayed after it.
func TestLateDoubtEndsAfterTheBound(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	startLateServer(t, e, time.Second)
	giveUp(t, e, "alice")
	ended := time.Now() // after the call's end: its doubt passes within a second of this

	ask := func() (string, string) {
		var bob asks
		ctx, cancel := context.WithTimeout(as("bob"), 10*time.Second)
		defer cancel()
		res, err := e.Client.Call(ctx, "late", "ask", json.RawMessage(`{"who":"bob"}`), bob.opts())
		if err != nil {
			t.Fatal(err)
		}
		return text(t, res), bob.seen()
	}
	if got, seen := ask(); !strings.Contains(got, "refused") || seen != "" {
		t.Fatalf("bob's ask just after alice's call was given up = %q (bob saw %q), want it refused", got, seen)
	}
	time.Sleep(time.Until(ended.Add(time.Second + 300*time.Millisecond)))
	if got, seen := ask(); got != "accept" || !strings.Contains(seen, "may I, bob?") {
		t.Fatalf("bob's ask after the bound = %q (bob saw %q), want bob asked and his accept", got, seen)
	}
}
