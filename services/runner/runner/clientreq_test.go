//lint:file-ignore SA1019 sampling and roots are deprecated by protocol 2026-07-28 (SEP-2577) but work for at least twelve months, and servers of older protocols use them: mcpbus relays them.

package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// The server's own requests during a call (elicitation, sampling) reach the
// NATS caller that named a client subject, and its answers reach the server.
func TestClientRequestsRelayedToTheCaller(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	var asked []model.ClientRequest
	answer := func(res any) *client.CallOptions {
		return &client.CallOptions{RequestID: "req-ask", OnClientRequest: func(ctx context.Context, req model.ClientRequest) (any, error) {
			asked = append(asked, req)
			return res, nil
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	res, err := e.Client.Call(ctx, "alpha", "ask", json.RawMessage(`{"message":"Who are you?"}`),
		answer(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != "hello Ada" {
		t.Fatalf("ask = %q, want the elicited name back", got)
	}
	if len(asked) != 1 || asked[0].Method != model.MethodElicit || asked[0].Server != "alpha" || asked[0].RequestID != "req-ask" {
		t.Fatalf("client requests = %+v, want one elicitation/create from alpha for req-ask", asked)
	}
	var params mcp.ElicitParams
	if err := json.Unmarshal(asked[0].Params, &params); err != nil || params.Message != "Who are you?" {
		t.Fatalf("elicitation params = %s (%v), want the server's message", asked[0].Params, err)
	}

	res, err = e.Client.Call(ctx, "alpha", "ask", json.RawMessage(`{"message":"Name?"}`), answer(&mcp.ElicitResult{Action: "decline"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != "the user chose decline" {
		t.Fatalf("declined ask = %q", got)
	}

	res, err = e.Client.Call(ctx, "alpha", "sample", json.RawMessage(`{"message":"6*7?"}`),
		answer(&mcp.CreateMessageResult{Model: "m1", Role: "assistant", Content: &mcp.TextContent{Text: "42"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != "m1 said: 42" {
		t.Fatalf("sample = %q", got)
	}
	if last := asked[len(asked)-1]; last.Method != model.MethodCreateMessage || !strings.Contains(string(last.Params), "6*7?") {
		t.Fatalf("sampling request = %+v", last)
	}
}

// The call's timeout (runtime.call_timeout here) stops while the caller's
// person answers a request for input: an answer that comes after the
// timeout still completes the call. Sampling is machine work and counts.
func TestInputWaitDoesNotCountAgainstTheCallTimeout(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.CallTimeout = model.Duration(time.Second)
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slowly := func(res any) *client.CallOptions {
		return &client.CallOptions{OnClientRequest: func(ctx context.Context, _ model.ClientRequest) (any, error) {
			select {
			case <-time.After(2500 * time.Millisecond): // a person reading the form
				return res, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}
	}
	res, err := e.Client.Call(ctx, "alpha", "ask", json.RawMessage(`{"message":"Who are you?"}`),
		slowly(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}))
	if err != nil {
		t.Fatalf("an answer given after the call timeout: %v", err)
	}
	if got := text(t, res); got != "hello Ada" {
		t.Fatalf("ask = %q", got)
	}
	start := time.Now()
	_, err = e.Client.Call(ctx, "alpha", "sample", json.RawMessage(`{"message":"6*7?"}`),
		slowly(&mcp.CreateMessageResult{Model: "m1", Role: "assistant", Content: &mcp.TextContent{Text: "42"}}))
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("a slow sampling answer: err = %v, want the call's timeout", err)
	}
	if took := time.Since(start); took > 2400*time.Millisecond {
		t.Fatalf("the sampling call took %s, want about its 1s timeout", took)
	}
}

// A call without a client subject, an answer that is an error and a caller
// that never answers all end the call cleanly, within its time.
func TestClientRequestsRefusedAndUnanswered(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	_, err := call(t, e, "alpha", "ask", `{"message":"Name?"}`)
	if err == nil || !strings.Contains(err.Error(), "no caller to relay elicitation/create") {
		t.Fatalf("ask without a client subject: err = %v, want a clear refusal", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = e.Client.Call(ctx, "alpha", "ask", json.RawMessage(`{"message":"Name?"}`), &client.CallOptions{
		OnClientRequest: func(context.Context, model.ClientRequest) (any, error) {
			return nil, apierr.Newf(apierr.Unauthorized, "the user is away")
		}})
	if err == nil || !strings.Contains(err.Error(), "the user is away") {
		t.Fatalf("refused elicitation: err = %v, want the caller's reason", err)
	}

	var calls atomic.Int32
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShort()
	start := time.Now()
	_, err = e.Client.Call(short, "alpha", "ask", json.RawMessage(`{"message":"Name?"}`), &client.CallOptions{
		OnClientRequest: func(ctx context.Context, _ model.ClientRequest) (any, error) {
			calls.Add(1)
			<-ctx.Done() // a person who never answers
			return nil, ctx.Err()
		}})
	if err == nil {
		t.Fatal("unanswered elicitation: the call succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("unanswered elicitation took %s, want the call's 2s", took)
	}
	if calls.Load() != 1 {
		t.Fatalf("the caller was asked %d times, want 1", calls.Load())
	}
	// The server is still fine afterwards.
	if _, err := call(t, e, "alpha", "echo", `{"message":"still here"}`); err != nil {
		t.Fatal(err)
	}
}

// A server of an older protocol says nothing of which call its request
// serves: while B's call (with a client subject) is in flight, A's call
// (without one) on the same session makes the request ambiguous, and it
// reaches nobody rather than B.
func TestOlderServersRequestNeverReachesAnotherCaller(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("old", testServer, "-protocols", "2025-11-25"))
	e.WaitState(t, "old", model.StateRunning, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var asked atomic.Int32
	first, release := make(chan struct{}), make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		res, err := e.Client.Call(ctx, "old", "ask", json.RawMessage(`{"message":"B, who are you?"}`), &client.CallOptions{
			OnClientRequest: func(ctx context.Context, req model.ClientRequest) (any, error) {
				if asked.Add(1) == 1 {
					close(first)
				}
				if !strings.Contains(string(req.Params), "B, who are you?") {
					return nil, apierr.Newf(apierr.Unauthorized, "B was asked another's question: %s", req.Params)
				}
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Bea"}}, nil
			}})
		if err == nil && text(t, res) != "hello Bea" {
			err = apierr.Newf(apierr.Internal, "B's ask = %q", text(t, res))
		}
		bDone <- err
	}()
	select {
	case <-first: // B's request is with B, B's call in flight
	case <-ctx.Done():
		t.Fatal("B was never asked")
	}

	_, err := call(t, e, "old", "ask", `{"message":"A, what is your password?"}`)
	if err == nil || !strings.Contains(err.Error(), "no caller to relay elicitation/create") {
		t.Fatalf("A's ask while B's call is in flight: err = %v, want the request refused", err)
	}
	close(release)
	if err := <-bDone; err != nil {
		t.Fatalf("B's call: %v", err)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("B was asked %d times, want once (its own question)", n)
	}
}

// A client subject outside the caller's reply prefix is refused before the
// server is called: a caller cannot aim the runner at someone else's inbox.
func TestClientSubjectMustBeTheCallersInbox(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	for _, hdr := range []string{bus.HeaderClientSubject, bus.HeaderProgressSubject} {
		msg := nats.NewMsg(e.Client.Subjects().Call("alpha", "echo"))
		msg.Data = []byte(`{"message":"x"}`)
		msg.Header.Set(hdr, "mcp.v1.config.delete")
		reply, err := e.NC.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rerr := bus.ReplyError(reply)
		if rerr == nil || rerr.Code != apierr.Validation || rerr.Field != hdr {
			t.Fatalf("%s outside the caller's inbox: reply %s, want VALIDATION_ERROR on %s", hdr, reply.Data, hdr)
		}
	}
}

// Roots come from the config; a change reaches the running server without a
// restart.
func TestRootsFromConfig(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Roots = []model.Root{{URI: "file:///srv/data", Name: "data"}}
	saved := e.Put(t, cfg)
	st := e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	res, err := call(t, e, "alpha", "roots", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != "file:///srv/data" {
		t.Fatalf("roots = %q, want the config's", got)
	}
	saved.Roots = []model.Root{{URI: "file:///srv/other"}, {URI: "file:///tmp"}}
	e.Put(t, saved)
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := call(t, e, "alpha", "roots", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, res); got == "file:///srv/other\nfile:///tmp" || got == "file:///tmp\nfile:///srv/other" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("roots after the change = %q", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if now := e.Status("alpha"); now.PID != st.PID {
		t.Fatalf("the roots change restarted the server (pid %d → %d)", st.PID, now.PID)
	}
}
