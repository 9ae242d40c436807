package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/openai/openai-go/v3"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// TestShutdownDrainsCalls: a gateway instance told to stop (SIGTERM) lets
// the calls in flight on /mcp and /mcp/invoke finish within its shutdown
// timeout, though a session's GET stream is open, and takes no new work:
// no new connection, and a request that starts on a connection made before
// is not served.
func TestShutdownDrainsCalls(t *testing.T) {
	t.Parallel()
	e := start(t)
	startTestServer(t, e, "slow")
	e2 := runGateway(t, e.st, "test-gateway-2", e.dir, e.logs, gateway.Options{ShutdownTimeout: 8 * time.Second})
	s := connectMCPAt(t, e2.url, e2.admin, "2025-11-25") // with its GET stream

	const sleep = `{"ms":5000}`
	var wg sync.WaitGroup
	var sessionErr, invokeErr error
	wg.Go(func() {
		res, err := s.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "slow__sleep", Arguments: json.RawMessage(sleep)})
		if err == nil && (res.IsError || !strings.Contains(textOf(res), "slept")) {
			err = fmt.Errorf("result %s", textOf(res))
		}
		sessionErr = err
	})
	wg.Go(func() {
		r := e2.do("POST", "/mcp/invoke", fmt.Sprintf(`{"tool_name":"slow__sleep","params":%s}`, sleep))
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "slept") {
			invokeErr = fmt.Errorf("%d %s", r.status, r.body)
		}
	})
	// A connection made before the stop, its request sent during it.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e2.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(1500 * time.Millisecond) // both requests are in flight (read by the gateway), even on a loaded host
	begin := time.Now()
	stopped := make(chan struct{})
	go func() { e2.stop(); close(stopped) }()
	time.Sleep(300 * time.Millisecond)
	if _, err := http.Get(e2.url + "/mcp"); err == nil {
		t.Error("the stopping instance still takes new connections")
	}
	// net/http closes it unanswered: the client sees a connection error.
	fmt.Fprintf(conn, "GET /api/v1/me HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", strings.TrimPrefix(e2.url, "http://"), e2.admin)
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
		resp.Body.Close()
		t.Errorf("a request that starts during the stop was answered %d", resp.StatusCode)
	}
	wg.Wait()
	if sessionErr != nil {
		t.Errorf("the session's call in flight: %v", sessionErr)
	}
	if invokeErr != nil {
		t.Errorf("the /mcp/invoke call in flight: %v", invokeErr)
	}
	<-stopped
	if d := time.Since(begin); d > 8*time.Second {
		t.Errorf("the instance took %s to stop", d)
	}
}

// TestShutdownKeepsHeldRoundTrip: a 2026-07-28 call held for its client's
// next round keeps its stopping instance for it (within the shutdown
// timeout): the client's retry, which reaches another instance, is passed
// to the stopping one and completes.
func TestShutdownKeepsHeldRoundTrip(t *testing.T) {
	t.Parallel()
	e := start(t)
	startTestServer(t, e, "asker")
	e2 := runGateway(t, e.st, "test-gateway-2", e.dir, e.logs, gateway.Options{ShutdownTimeout: 8 * time.Second})
	first := modernCall(t, e2.url, e2.admin, "asker__ask", `"arguments":{"message":"Your name?"}`)
	var requests map[string]json.RawMessage
	var state string
	if json.Unmarshal(first["inputRequests"], &requests) != nil || len(requests) != 1 || json.Unmarshal(first["requestState"], &state) != nil {
		t.Fatalf("first round: %v", first)
	}
	var answers []string
	for id := range requests {
		answers = append(answers, fmt.Sprintf(`%q:{"action":"accept","content":{"name":"Ada"}}`, id))
	}
	stopped := make(chan struct{})
	go func() { e2.stop(); close(stopped) }()
	time.Sleep(500 * time.Millisecond) // the person answering
	final := modernCall(t, e.url, e.admin, "asker__ask", fmt.Sprintf(`"arguments":{"message":"Your name?"},"requestState":%q,"inputResponses":{%s}`,
		state, strings.Join(answers, ",")))
	if !strings.Contains(string(final["content"]), "hello Ada") {
		t.Fatalf("the retry through another instance while the holder stops: %v", final)
	}
	<-stopped
}

// TestStackStopDrainsGatewayFirst: `mcpbus up` stopping stops its gateway
// first, so the calls the gateway lets finish still have their runner.
func TestStackStopDrainsGatewayFirst(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{ShutdownTimeout: 8 * time.Second})
	slug := e.enable(t, testServerConfig("slow"))
	got := make(chan reply, 1)
	go func() {
		got <- httpDo(t, http.MethodPost, e.url+"/mcp/invoke", e.admin, map[string]any{"tool_name": slug + "__sleep", "params": map[string]any{"ms": 3000}})
	}()
	time.Sleep(500 * time.Millisecond) // the call is in flight
	stopped := make(chan struct{})
	go func() { e.st.Close(); close(stopped) }()
	if r := <-got; r.status != http.StatusOK || !strings.Contains(string(r.body), "slept") {
		t.Errorf("the call in flight while the stack stops: %d %s", r.status, r.body)
	}
	<-stopped
}

// TestKilledGatewayCallRunsOn: a gateway instance that dies mid-call (its
// bus connection gone at once, no cancel sent) leaves the call to run to its
// end at the runner, whose call event says how it ended.
func TestKilledGatewayCallRunsOn(t *testing.T) {
	t.Parallel()
	e := start(t)
	startTestServer(t, e, "slow")
	events, err := e.st.Conn.SubscribeSync(bus.NewSubjects("").Event("call", "slow"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := e.st.ConnectAs("test-gateway-killed", access.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := gateway.New(ctx, nc, gateway.Options{Addr: "127.0.0.1:0", DataDir: e.dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	<-g.Ready()
	url := "http://" + g.Addr()
	waitTools(t, &env{t: t, url: url, admin: e.admin}, func(names []string) bool { return contains(names, "slow__sleep") })

	got := make(chan reply, 1)
	go func() {
		got <- httpDo(t, http.MethodPost, url+"/mcp/invoke", e.admin, map[string]any{"tool_name": "slow__sleep", "params": map[string]any{"ms": 1500}})
	}()
	time.Sleep(500 * time.Millisecond) // the call runs
	nc.Close()                         // the instance is gone from the bus, as when killed
	if r := <-got; r.status == http.StatusOK {
		t.Fatalf("the call of a gateway without its bus answered %d %s", r.status, r.body)
	}
	ev := nextCallEvent(t, events)
	if ev.Tool != "sleep" || ev.Outcome != "ok" || ev.DurationMS < 1400 {
		t.Fatalf("call event %+v, want the sleep run to its end (ok, ~1500 ms)", ev)
	}
}

// TestStopDrainsCompletion: a /v1 chat completion in flight when the
// gateway stops is let finish within the shutdown timeout, as calls are,
// rather than cancelled at once.
func TestStopDrainsCompletion(t *testing.T) {
	t.Parallel()
	// The drain's bound, not the helpers' 4 s: in CI (load ~16) the turn
	// (an LLM request, the 1.5 s call, another) took longer than that.
	c := startChatWith(t, gateway.Options{EventHeartbeat: 500 * time.Millisecond, ShutdownTimeout: 20 * time.Second})
	c.putProfile(t, "assistant", nil)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__sleep", `{"ms":1500}`)), llmtest.Text("slept well"))
	type answer struct {
		text string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		client := oaiClient(c, c.chat)
		out, err := client.Chat.Completions.New(ctxT(t, time.Minute), openai.ChatCompletionNewParams{
			Model:    "assistant",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Sleep a little")},
		})
		if err != nil {
			got <- answer{err: err}
			return
		}
		got <- answer{text: out.Choices[0].Message.Content}
	}()
	// The turn has begun (the model was asked; the call follows), however
	// loaded the machine: a fixed sleep stopped the gateway before the
	// completion reached the chat.
	for deadline := time.Now().Add(30 * time.Second); c.llm.Attempts() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the completion never reached the model")
		}
	}
	time.Sleep(300 * time.Millisecond) // the tool call runs
	stopped := make(chan struct{})
	go func() { c.st.Close(); close(stopped) }()
	if a := <-got; a.err != nil || a.text != "slept well" {
		t.Errorf("the completion in flight while the gateway stops: %q %v", a.text, a.err)
	}
	<-stopped
}
