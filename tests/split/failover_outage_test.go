package split

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestRunnerKilledIsAnOutage: the runner owning a server is SIGKILLed (its
// lease stays until it expires, no other runner is up). Meanwhile the gateway
// still lists the tool and answers its calls as an outage, never as an
// unknown tool: /mcp/invoke 503 SERVICE_UNAVAILABLE with Retry-After, /mcp a
// tool error saying it is temporarily unavailable. A call in flight at the
// kill ends once the runner's heartbeat expires (runnerwatch), not at the
// gateway's call timeout, and so does a chat turn's tool call (not at the
// chat's call timeout). A runner started then takes the server over and the
// calls work again.
func TestRunnerKilledIsAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server and seven mcpbus processes")
	}
	si := startStandIns(t)
	d := startSplit(t, si)
	defer d.stop(t)
	if r := d.cli(t, "", "servers", "add", serverName, "--binary", testServer, "--arg", "-name", "--arg", serverName, "--json"); r.Code != 0 {
		t.Fatalf("servers add: %s", r)
	}
	if r := d.cli(t, "", "servers", "enable", serverName, "--json"); r.Code != 0 {
		t.Fatalf("servers enable: %s", r)
	}
	d.waitState(t, model.StateRunning, 30*time.Second)
	key := d.adminKey(t)
	var postTool func(timeout time.Duration, tool, params string) (int, string, map[string]any, error)
	s := d.connectMCP(t, key)
	tool := serverName + "__echo"
	waitMCPTools(t, s, 20*time.Second, "listed "+tool, func(names []string) bool { return len(names) > 0 })
	post := func(timeout time.Duration) (int, string, map[string]any, error) {
		return postTool(timeout, tool, `{"message":"hi"}`)
	}
	postTool = func(timeout time.Duration, tool, params string) (int, string, map[string]any, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.httpURL+"/mcp/invoke",
			strings.NewReader(`{"tool_name":"`+tool+`","params":`+params+`}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := (&http.Client{Transport: d.http}).Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, resp.Header.Get("Retry-After"), out, nil
	}
	invoke := func() (int, string, map[string]any) {
		status, retry, out, err := post(20 * time.Second)
		if err != nil {
			t.Fatalf("POST /mcp/invoke: %v", err)
		}
		return status, retry, out
	}
	if status, _, out := invoke(); status != http.StatusOK || out["success"] != true {
		t.Fatalf("before the kill: %d %v", status, out)
	}

	var runner *testkit.Proc
	for _, p := range d.procs {
		if p.Name() == "runner" {
			runner = p
		}
	}
	// A call of 30 s, in flight at the kill.
	type answer struct {
		status int
		retry  string
		out    map[string]any
		err    error
		at     time.Time
	}
	inFlight := make(chan answer, 1)
	go func() {
		status, retry, out, err := postTool(50*time.Second, serverName+"__progress", `{"steps":60,"ms":500}`)
		inFlight <- answer{status, retry, out, err, time.Now()}
	}()
	// A chat turn's call of the same 30 s tool, in flight at the kill too
	// (the chat's call timeout is 30 s).
	llm := llmtest.Start(t, "")
	llm.Enqueue(llmtest.ToolCalls(llmtest.Call(serverName+"__progress", `{"steps":60,"ms":500}`)), llmtest.Text("the tool failed"))
	nc := operatorConn(t, d)
	var profile model.Profile
	request(t, nc, "mcp.v1.chat.profiles.put", model.ChatProfilePutRequest{Profile: model.Profile{
		Name: "outage", Provider: model.ChatProviderOpenAI, Model: "test-model", BaseURL: llm.OpenAIBaseURL()}}, &profile)
	const conv = "runner-killed"
	var sent model.ChatSendReply
	request(t, nc, "mcp.v1.chat.send", model.ChatSendRequest{Conversation: conv, Profile: "outage", Message: "call the slow tool"}, &sent)
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		return countKind(history(t, nc, conv), model.EntryModelStep) == 1, "the model has not asked for the tool yet"
	})
	time.Sleep(time.Second)
	killed := time.Now()
	runner.Kill(t)

	// A call sent before nats-server has seen the killed runner's connection
	// close is delivered to it: NATS cannot tell. Such a call ends when the
	// runner's heartbeat expires, as one in flight at the kill does ("stopped
	// serving it during the call"), or is given up after 5 s here; the next
	// one, sent once the server knows, must be the outage's answer.
	var status int
	var retry string
	var out map[string]any
	for attempt := 1; ; attempt++ {
		var err error
		status, retry, out, err = post(5 * time.Second)
		if err != nil && (attempt == 3 || !errors.Is(err, context.DeadlineExceeded)) {
			t.Fatalf("POST /mcp/invoke after the kill (attempt %d): %v", attempt, err)
		}
		if err != nil {
			t.Logf("POST /mcp/invoke right after the kill got no answer in 5 s (%v): sent before the server saw the runner's connection close; asking again", err)
			continue
		}
		if msg, _ := out["error"].(string); attempt < 3 && strings.Contains(msg, "stopped serving it during the call") {
			t.Logf("POST /mcp/invoke right after the kill reached the killed runner (%d: %s): sent before the server saw its connection close; asking again", status, msg)
			continue
		}
		break
	}
	if msg, _ := out["error"].(string); status != http.StatusServiceUnavailable || retry != "5" ||
		out["error_type"] != "SERVICE_UNAVAILABLE" || !strings.Contains(msg, "temporarily unavailable") {
		t.Fatalf("/mcp/invoke after the kill: %d Retry-After %q %v, want 503 SERVICE_UNAVAILABLE with Retry-After 5", status, retry, out)
	}
	a := <-inFlight
	if a.err != nil {
		t.Fatalf("the call in flight at the kill: %v", a.err)
	}
	if msg, _ := a.out["error"].(string); a.status != http.StatusServiceUnavailable || a.retry != "5" ||
		!strings.Contains(msg, "stopped serving it during the call") || !strings.Contains(msg, "may or may not have run") {
		t.Fatalf("the call in flight at the kill: %d Retry-After %q %v, want 503 saying its runner stopped during it", a.status, a.retry, a.out)
	}
	// The lease TTL is 5 s: the heartbeat expires within it, far from the
	// gateway's 60 s call timeout.
	if took := a.at.Sub(killed); took > 15*time.Second {
		t.Fatalf("the call in flight at the kill was answered %s after it, want about the lease TTL", took)
	}
	t.Logf("the call in flight at the kill was answered %s after it", a.at.Sub(killed).Round(100*time.Millisecond))
	// The chat's call ends as the gateway's does, at the lease's end.
	var result model.ChatEntry
	testkit.WaitFor(t, 40*time.Second, func() (bool, string) {
		for _, e := range history(t, nc, conv) {
			if e.Kind == model.EntryToolResult {
				result = e
				return true, ""
			}
		}
		return false, "no tool result in the chat's log yet"
	})
	if took := result.At.Sub(killed); took > 15*time.Second || !strings.Contains(string(result.Payload), "stopped serving it during the call") {
		t.Fatalf("the chat's call in flight at the kill ended %s after it with %s, want within about the lease TTL, saying its runner stopped", took, result.Payload)
	}
	t.Logf("the chat's call in flight at the kill ended %s after it", result.At.Sub(killed).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": "hi"}})
	if err != nil {
		t.Fatalf("/mcp after the kill: %v, want a tool result (never unknown tool)", err)
	}
	text := ""
	if len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	if !res.IsError || !strings.Contains(text, "temporarily unavailable") {
		t.Fatalf("/mcp after the kill: isError %v %q", res.IsError, text)
	}
	waitMCPTools(t, s, 5*time.Second, "kept "+tool, func(names []string) bool { return slices.Contains(names, tool) })

	// A new runner takes the server over once the dead one's lease expires.
	ids := filepath.Join(d.dataDir, "nats")
	second := d.start(t, "runner-2", mcpbusBin, "serve", "runner", "--nats-nkey", filepath.Join(ids, "runner.nk"),
		"--nats", d.natsURL, "--data-dir", d.dataDir, "--log-level", "debug")
	second.WaitLog(t, `"msg":"service ready"`, 30*time.Second)
	// Polled at 5 per second: the key's default rate limit (20/s) must leave
	// room for the /mcp call after it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		status, _, out := invoke()
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no takeover: still %d %v", status, out)
		}
	}
	if got := mcpCallText(t, s, tool, map[string]any{"message": "back"}); !strings.Contains(got, "back") {
		t.Fatalf("/mcp after the takeover: %q", got)
	}
	testkit.StopAll(t, []*testkit.Proc{second}, 15*time.Second)
}
