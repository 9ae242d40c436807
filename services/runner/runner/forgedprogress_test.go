package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A per-principal server keeps one session per user; progress sent on one
// user's session reaches only calls made on that session. The runner's
// progress tokens count up, so a server could otherwise name another
// user's call in progress sent on its own session and put its words into
// that user's call.
func TestForgedProgressStaysOnItsSession(t *testing.T) {
	var mu sync.Mutex
	var aliceTok any
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	s.AddTool(&mcp.Tool{Name: "wait", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		aliceTok = req.Params.GetProgressToken()
		mu.Unlock()
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Message: "own"})
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "waited"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "forge", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		tok := aliceTok
		mu.Unlock()
		err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 2, Message: "forged"})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "forged " + fmt.Sprint(tok, err)}}}, nil
	})
	url := testmcp.ServeServerHTTP(t, s, nil, nil)
	opts := lifecycleOpts()
	opts.Resolver = ppResolver{server: "server-token-0123456789", user: "user-token-0123456789"}
	e := runnertest.Start(t, opts)
	e.Put(t, perPrincipalRemote(url))
	e.WaitState(t, "remote", model.StateRunning, 10*time.Second)

	var seen []string
	var seenMu sync.Mutex
	inbox := e.NC.NewRespInbox()
	sub, err := e.NC.Subscribe(inbox+".progress", func(m *nats.Msg) {
		seenMu.Lock()
		seen = append(seen, string(m.Data))
		seenMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	as := func(who, tool string, progress bool) *nats.Msg {
		msg := nats.NewMsg(bus.NewSubjects("").Call("remote", tool))
		msg.Data = []byte(`{}`)
		msg.Header.Set(bus.HeaderRequestID, uuid.NewString())
		if progress {
			msg.Header.Set(bus.HeaderProgressSubject, inbox+".progress")
		}
		principal.Set(msg.Header, principal.Principal{ID: "key:" + who, Kind: principal.KindKey})
		return msg
	}
	done := make(chan error, 1)
	go func() {
		rep, err := e.NC.RequestMsg(as("alice", "wait", true), 10*time.Second)
		if err == nil && !strings.Contains(string(rep.Data), "waited") {
			t.Errorf("alice's call: %s %s", rep.Data, rep.Header.Get(bus.HeaderError))
		}
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		started := aliceTok != nil
		mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's call never reached the server")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, err := e.NC.RequestMsg(as("bob", "forge", false), 10*time.Second)
	if err != nil || !strings.Contains(string(rep.Data), "forged") {
		t.Fatalf("bob's call: %v %s", err, rep.Data)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	joined := strings.Join(seen, "\n")
	if !strings.Contains(joined, `"own"`) || strings.Contains(joined, "forged") {
		t.Fatalf("alice's progress: %s\nwant her own session's, not another's", joined)
	}
}
