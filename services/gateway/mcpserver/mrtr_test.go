//lint:file-ignore SA1019 sampling is deprecated by protocol 2026-07-28 (SEP-2577) but works for at least twelve months, and servers of older protocols use it: mcpbus relays it.

package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// asker is what a client's handlers saw.
type asker struct {
	mu                sync.Mutex
	elicited, sampled []string
	progress          []float64
}

func (a *asker) seen() (elicited, sampled []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.elicited...), append([]string(nil), a.sampled...)
}

// connectAsking connects a go-sdk client of its default protocol (2026-07-28,
// no session) that answers elicitation with elicit and sampling with "blue".
func connectAsking(t *testing.T, url string, elicit func(msg string) (*mcp.ElicitResult, error)) (*mcp.ClientSession, *asker) {
	t.Helper()
	a := &asker{}
	mc := mcp.NewClient(&mcp.Implementation{Name: "asking-client", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			a.mu.Lock()
			a.elicited = append(a.elicited, req.Params.Message)
			a.mu.Unlock()
			return elicit(req.Params.Message)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			a.mu.Lock()
			a.progress = append(a.progress, req.Params.Progress)
			a.mu.Unlock()
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			a.mu.Lock()
			a.sampled = append(a.sampled, req.Params.Messages[0].Content.(*mcp.TextContent).Text)
			a.mu.Unlock()
			return &mcp.CreateMessageResult{Model: "local", Role: "assistant", Content: &mcp.TextContent{Text: "blue"}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: http.DefaultClient}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" || cs.ID() != "" {
		t.Fatalf("client negotiated %s with session %q, want 2026-07-28 without one", v, cs.ID())
	}
	return cs, a
}

// waitHeldGone waits until agg holds no call and no goroutine runs a held
// call's code: nothing of a finished or refused call is left behind.
func waitHeldGone(t *testing.T, agg *mcpserver.Aggregator, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for agg.HeldCalls() != 0 || mcpserver.HeldGoroutines() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d held calls and %d goroutines of held calls left", what, agg.HeldCalls(), mcpserver.HeldGoroutines())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A go-sdk client of protocol 2026-07-28 gets the server's elicitation and
// sampling as input_required results, and its retries' answers reach the
// server: the tool's result shows them, a declined elicitation included.
func TestModernClientAnswersServerRequests(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	cs, seen := connectAsking(t, e.url, func(msg string) (*mcp.ElicitResult, error) {
		if msg == "decline me" {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Grace"}}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct{ tool, message, want string }{
		{"alpha__ask", "Your name?", "hello Grace"},
		{"alpha__sample", "sky colour?", "local said: blue"},
		{"alpha__ask", "decline me", "the user chose decline"},
		{"alpha__echo", "plain", "plain"}, // a call that asks nothing
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: map[string]any{"message": c.message}})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		if got := textOf(t, res); got != c.want || res.IsError || res.NeedsInput() {
			t.Fatalf("%s = %q (isError %v), want %q", c.tool, got, res.IsError, c.want)
		}
	}
	// Progress of a held call reaches the round's request that asked for it.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__progress", Arguments: map[string]any{"steps": 3, "ms": 10},
		Meta: mcp.Meta{"progressToken": "tok-1"}})
	if err != nil || textOf(t, res) != "done 3 steps" {
		t.Fatalf("progress: %v %+v", err, res)
	}
	seen.mu.Lock()
	progress := fmt.Sprint(seen.progress)
	seen.mu.Unlock()
	if progress != "[1 2 3]" {
		t.Fatalf("progress notifications %s, want [1 2 3]", progress)
	}
	elicited, sampled := seen.seen()
	if strings.Join(elicited, "|") != "Your name?|decline me" || strings.Join(sampled, "|") != "sky colour?" {
		t.Fatalf("the client saw elicitations %q and sampling %q", elicited, sampled)
	}
	waitHeldGone(t, e.agg, "after the calls")
}

// askingBody is a tools/call of 2026-07-28 from a client that declared
// elicitation and sampling.
func askingBody(id int, params string) string {
	return strings.Replace(modernBody(id, "tools/call", params), `"io.modelcontextprotocol/clientCapabilities":{}`,
		`"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}},"sampling":{}}`, 1)
}

// inputRequired is the input_required result of a round.
type inputRequired struct {
	requests map[string]struct {
		Method string         `json:"method"`
		Params map[string]any `json:"params"`
	}
	state string
}

// firstRound calls alpha__ask as key and checks the message is the
// input_required result of SEP-2322: resultType, one elicitation/create
// input request with the server's params, an opaque requestState, and no
// tool result fields.
func firstRound(t *testing.T, url, key string) (id string, state string) {
	t.Helper()
	r := rawWith(t, url, key, "", askingBody(1, `{"name":"alpha__ask","arguments":{"message":"Your name?"}}`), modernHeaders("tools/call", "alpha__ask"))
	m := decodeMsg(t, r)
	if r.status != http.StatusOK || m.Error != nil {
		t.Fatalf("first round: HTTP %d %s", r.status, r.body)
	}
	var rt string
	if json.Unmarshal(m.Result["resultType"], &rt) != nil || rt != "input_required" {
		t.Fatalf("resultType %s, want input_required: %s", m.Result["resultType"], r.body)
	}
	if _, ok := m.Result["isError"]; ok {
		t.Fatalf("an input_required result with isError: %s", r.body)
	}
	if c, ok := m.Result["content"]; ok && string(c) != "null" {
		t.Fatalf("an input_required result with content %s", c)
	}
	var ir inputRequired
	if err := json.Unmarshal(m.Result["inputRequests"], &ir.requests); err != nil || len(ir.requests) != 1 {
		t.Fatalf("inputRequests %s (%v), want one", m.Result["inputRequests"], err)
	}
	if err := json.Unmarshal(m.Result["requestState"], &ir.state); err != nil || ir.state == "" {
		t.Fatalf("requestState %s, want a string", m.Result["requestState"])
	}
	for k, req := range ir.requests {
		schema, _ := req.Params["requestedSchema"].(map[string]any)
		if req.Method != "elicitation/create" || req.Params["message"] != "Your name?" || req.Params["mode"] != "form" || schema["type"] != "object" {
			t.Fatalf("input request %s = %+v, want the server's elicitation/create", k, req)
		}
		id = k
	}
	if strings.Contains(ir.state, "Your name") || strings.Contains(ir.state, "alpha__ask") {
		t.Fatalf("requestState %q shows what it carries", ir.state)
	}
	return id, ir.state
}

// retry sends the retry of a round as key and returns its JSON-RPC message.
func retry(t *testing.T, url, key, tool, responses, state string) rpcMsg {
	t.Helper()
	params := fmt.Sprintf(`{"name":%q,"arguments":{"message":"Your name?"},"requestState":%q`, tool, state)
	if responses != "" {
		params += `,"inputResponses":` + responses
	}
	return decodeMsg(t, rawWith(t, url, key, "", askingBody(2, params+"}"), modernHeaders("tools/call", tool)))
}

// wantRefused checks a retry got -32602 with a message containing want.
func wantRefused(t *testing.T, m rpcMsg, want string) {
	t.Helper()
	if m.Error == nil || m.Error.Code != jsonrpc.CodeInvalidParams || !strings.Contains(m.Error.Message, want) {
		t.Fatalf("retry answered %+v %+v, want -32602 saying %q", m.Error, m.Result, want)
	}
}

// The messages of multi round-trip as raw HTTP, and every retry the gateway
// must refuse: a forged state (changes nothing), another caller's state, a
// state retried on another tool, a round without its answer (each of those
// ends the held call).
func TestModernInputRequiredMessages(t *testing.T) {
	principals := map[string]*auth.Principal{
		"key-a": {KeyID: "k-a", Scopes: []string{auth.ScopeCall}},
		"key-b": {KeyID: "k-b", Scopes: []string{auth.ScopeCall}},
	}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)

	// The fast path (one application/json answer) takes the calls of a
	// client that declared no capability; one that may be asked goes to
	// go-sdk (an event stream), whose tool handler can hold the call.
	echo := `{"name":"alpha__echo","arguments":{"message":"hi"}}`
	for body, want := range map[string]string{
		modernBody(1, "tools/call", echo): "application/json",
		askingBody(1, echo):               "text/event-stream",
	} {
		r := rawWith(t, e.url, "key-a", "", body, modernHeaders("tools/call", "alpha__echo"))
		if m := decodeMsg(t, r); m.Error != nil || !strings.HasPrefix(r.ctype, want) || !strings.Contains(string(m.Result["content"]), `"hi"`) {
			t.Fatalf("echo answered %s %s, want %s", r.ctype, r.body, want)
		}
	}

	// A full exchange: input_required, then the answer's result.
	id, state := firstRound(t, e.url, "key-a")
	m := retry(t, e.url, "key-a", "alpha__ask", fmt.Sprintf(`{%q:{"action":"accept","content":{"name":"Ada"}}}`, id), state)
	var rt string
	if m.Error != nil || json.Unmarshal(m.Result["resultType"], &rt) != nil || rt != "complete" || !strings.Contains(string(m.Result["content"]), "hello Ada") {
		t.Fatalf("retry answered %+v %v", m.Error, m.Result)
	}
	waitHeldGone(t, e.agg, "after a full exchange")

	// A forged or foreign state names no held call: refused, and the call
	// it was meant for goes on.
	id, state = firstRound(t, e.url, "key-a")
	instance, sealed, _ := strings.Cut(state, ".")
	flipped := []byte(sealed)
	flipped[len(flipped)/2] ^= 1
	answer := fmt.Sprintf(`{%q:{"action":"accept","content":{"name":"Ada"}}}`, id)
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", answer, instance+"."+string(flipped)), "not one this gateway issued")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", answer, "x"+state), "not one this gateway issued")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", answer, "abcdefghijklmnop."+sealed), "is gone")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", answer, "garbage"), "not one this gateway issued")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", answer, ""), "without requestState")
	if e.agg.HeldCalls() != 1 {
		t.Fatalf("%d held calls after forged states, want the one call still held", e.agg.HeldCalls())
	}
	// Another caller's state: refused, and the call goes on for its owner,
	// who completes it (a replayed state cannot end someone else's call).
	wantRefused(t, retry(t, e.url, "key-b", "alpha__ask", answer, state), "another caller")
	if e.agg.HeldCalls() != 1 {
		t.Fatalf("%d held calls after another caller's retry, want the owner's still held", e.agg.HeldCalls())
	}
	if m := retry(t, e.url, "key-a", "alpha__ask", answer, state); m.Error != nil || !strings.Contains(string(m.Result["content"]), "hello Ada") {
		t.Fatalf("the owner's retry after another caller's answered %+v %v", m.Error, m.Result)
	}
	waitHeldGone(t, e.agg, "after the owner's retry")
	// Once the call is over, another caller holding its state learns no
	// more than before (not that it ended): the owner alone is told.
	wantRefused(t, retry(t, e.url, "key-b", "alpha__ask", answer, state), "another caller")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", answer, state), "is over")

	// The state of a call of alpha__ask retried on alpha__sample.
	_, state = firstRound(t, e.url, "key-a")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__sample", `{"x":{"action":"accept"}}`, state), "is of a call of alpha__ask")
	waitHeldGone(t, e.agg, "after a retry on another tool")

	// A retry without the answer, or with the wrong kind of answer.
	id, state = firstRound(t, e.url, "key-a")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", "", state), "has no answer to "+id)
	waitHeldGone(t, e.agg, "after a retry without answers")
	id, state = firstRound(t, e.url, "key-a")
	wantRefused(t, retry(t, e.url, "key-a", "alpha__ask", fmt.Sprintf(`{%q:{"role":"assistant","model":"m","content":{"type":"text","text":"x"}}}`, id), state), "is not a result of elicitation/create")
	waitHeldGone(t, e.agg, "after a retry with a sampling answer to an elicitation")
}

// A client that never answers: the held call ends when the call's time runs
// out (at the runner too), nothing is left behind, and its requestState has
// expired.
func TestModernUnansweredInputRequest(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true, CallTimeout: 2 * time.Second}, nil)
	e.addServer(t, "alpha", nil)
	events := make(chan model.CallEvent, 16)
	sub, err := e.NC.Subscribe(e.Client.Subjects().Event("call", "alpha"), func(m *nats.Msg) {
		var ev model.CallEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			events <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	// go-sdk's client fails the call when its handler fails, and sends no retry.
	cs, _ := connectAsking(t, e.url, func(string) (*mcp.ElicitResult, error) {
		return nil, errors.New("the user walked away")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__ask", Arguments: map[string]any{"message": "Your name?"}}); err == nil || !strings.Contains(err.Error(), "the user walked away") {
		t.Fatalf("unanswered ask: err = %v", err)
	}
	if n := e.agg.HeldCalls(); n != 1 {
		t.Fatalf("%d held calls while the client thinks, want 1", n)
	}
	waitHeldGone(t, e.agg, "after the call's timeout")
	for waiting := time.After(30 * time.Second); ; {
		var ev model.CallEvent
		select {
		case ev = <-events:
		case <-waiting:
			t.Fatal("no call event for the unanswered call")
		}
		if ev.Tool != "ask" {
			continue
		}
		// The runner sees the caller give up (its outcome says so) when
		// the call's 2s are over, not later.
		if ev.Outcome == "ok" || ev.DurationMS < 1500 || ev.DurationMS > 4000 {
			t.Fatalf("call event %+v, want the ask ended by its timeout", ev)
		}
		break
	}

	// A requestState past the call's time.
	_, state := firstRound(t, e.url, "")
	time.Sleep(2100 * time.Millisecond)
	wantRefused(t, retry(t, e.url, "", "alpha__ask", `{"mcpbus-1":{"action":"decline"}}`, state), "expired")
	waitHeldGone(t, e.agg, "after an expired state")
}

// A retry that reaches another gateway instance (no sticky routing) is
// passed over the bus to the instance holding the call, which checks it as
// its own: the answer reaches the server, another caller is refused.
func TestModernRetryOnAnotherInstance(t *testing.T) {
	principals := map[string]*auth.Principal{
		"key-a": {KeyID: "k-a", Scopes: []string{auth.ScopeCall}},
		"key-b": {KeyID: "k-b", Scopes: []string{auth.ScopeCall}},
	}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	other, err := mcpserver.New(ctx, e.NC, mcpserver.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	srv := httptest.NewServer(keys(principals)(other.Handler()))
	t.Cleanup(srv.Close)

	id, state := firstRound(t, e.url, "key-a")
	m := retry(t, srv.URL, "key-a", "alpha__ask", fmt.Sprintf(`{%q:{"action":"accept","content":{"name":"Lin"}}}`, id), state)
	if m.Error != nil || !strings.Contains(string(m.Result["content"]), "hello Lin") {
		t.Fatalf("retry on the other instance answered %+v %v", m.Error, m.Result)
	}
	waitHeldGone(t, e.agg, "after a passed-on retry")
	if other.HeldCalls() != 0 {
		t.Fatal("the other instance holds a call")
	}

	id, state = firstRound(t, e.url, "key-a")
	wantRefused(t, retry(t, srv.URL, "key-b", "alpha__ask", fmt.Sprintf(`{%q:{"action":"decline"}}`, id), state), "another caller")
	if e.agg.HeldCalls() != 1 {
		t.Fatalf("%d held calls after another caller's passed-on retry, want the owner's still held", e.agg.HeldCalls())
	}
	if m := retry(t, srv.URL, "key-a", "alpha__ask", fmt.Sprintf(`{%q:{"action":"accept","content":{"name":"Lin"}}}`, id), state); m.Error != nil || !strings.Contains(string(m.Result["content"]), "hello Lin") {
		t.Fatalf("the owner's passed-on retry after another caller's answered %+v %v", m.Error, m.Result)
	}
	waitHeldGone(t, e.agg, "after the owner's passed-on retry")
}

// A retry passed to a holder that dies before answering (killed while the
// round waits for its server) fails soon with "is gone", not at the call's
// timeout.
func TestModernRetryHolderDies(t *testing.T) {
	t.Parallel()
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	_, state := firstRound(t, e.url, "")
	_, sealed, _ := strings.Cut(state, ".")
	// A holder that takes the retry and is gone before it answers.
	const holder = "abcdefghijklmnop"
	got := make(chan struct{}, 1)
	sub, err := e.NC.Subscribe("mcp.v1.gateway.retry."+holder, func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-got
		time.Sleep(300 * time.Millisecond)
		_ = sub.Unsubscribe()
	}()
	begin := time.Now()
	wantRefused(t, retry(t, e.url, "", "alpha__ask", `{"mcpbus-1":{"action":"decline"}}`, holder+"."+sealed), "is gone")
	if d := time.Since(begin); d > 8*time.Second {
		t.Fatalf("the retry to a dead holder took %s", d)
	}
}
