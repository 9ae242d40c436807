package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// putApprovalRules replaces the approval rules in the bus's approvals store
// with rules and returns the store, for the held calls.
func putApprovalRules(t *testing.T, ctx context.Context, nc *nats.Conn, rules ...model.GatewayApprovalRule) *approvals.Store {
	t.Helper()
	store, err := approvals.Open(ctx, ctx, nc, approvals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutRules(ctx, model.ApprovalRules{Rules: rules}); err != nil {
		t.Fatal(err)
	}
	return store
}

// A rule naming a tool as its server does (dots__files.remove, a name the
// catalog lists sanitised) decides its calls on the bus while the server is
// still starting, too. Before, a call that reached the runner before the
// server's tools were known was checked under <server>__<subject token>
// (dots__files_remove_<hash>), which the rule does not name: it ran.
func TestApprovalRuleOfAToolNotListedYet(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "dots", Version: "1"}, nil)
	var ran atomic.Int32
	s.AddTool(&mcp.Tool{Name: "files.remove", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			ran.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "removed"}}}, nil
		})
	// The server takes 3 s to answer initialize: calls meet it starting.
	url := testmcp.ServeServerHTTP(t, s, nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"method":"initialize"`)) {
				time.Sleep(3 * time.Second)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	})
	e := runnertest.Start(t, quickOpts())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	putApprovalRules(t, ctx, e.NC,
		model.GatewayApprovalRule{Tool: "dots__files.remove", Decision: model.ApprovalDeny},
		model.GatewayApprovalRule{Tool: "alpha__echo", Decision: model.ApprovalDeny})
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	subjects := bus.NewSubjects("")
	callErr := func(server, tool string) *apierr.Error {
		t.Helper()
		reply, err := e.NC.Request(subjects.Call(server, model.ToolToken(tool)), []byte(`{}`), 15*time.Second)
		if err != nil {
			t.Fatalf("%s.%s: %v", server, tool, err)
		}
		return bus.ReplyError(reply)
	}
	// The runner's watch has the rules once alpha's echo is refused.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if e := callErr("alpha", "echo"); e != nil && e.Field == approvals.FieldApproval {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner never applied the rules")
		}
	}
	e.Put(t, model.McpConfig{ID: uuid.NewString(), Name: "dots", Enabled: true,
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "dots", model.StateStarting, 10*time.Second)

	if st := e.Status("dots").State; st != model.StateStarting {
		t.Fatalf("the server is %s already: the call below would not meet it starting", st)
	}
	got := callErr("dots", "files.remove")
	if got == nil || got.Code != apierr.Unauthorized || got.Field != approvals.FieldApproval {
		t.Fatalf("a call of files.remove while the server starts: %v, want UNAUTHORIZED (approval); the tool ran %d times", got, ran.Load())
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the denied tool ran %d times", n)
	}
	// Once started, the rule holds as before.
	e.WaitState(t, "dots", model.StateRunning, 10*time.Second)
	if got := callErr("dots", "files.remove"); got == nil || got.Field != approvals.FieldApproval {
		t.Fatalf("a call of files.remove once running: %v", got)
	}
}
