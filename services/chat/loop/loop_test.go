package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
	"github.com/mcpbus/mcpbus/services/chat/provider"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openLog runs an embedded NATS with JetStream and opens the log on it.
func openLog(t *testing.T) (*conversation.Log, jetstream.JetStream) {
	t.Helper()
	js, err := jetstream.New(testkit.Connect(t, testkit.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := conversation.Open(ctxT(t), js, conversation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l, js
}

// fakeTools is a catalog of tools answered by functions, counting calls.
type fakeTools struct {
	mu       sync.Mutex
	handlers map[string]func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
	calls    map[string]int
	args     []string
	lists    int
}

func newFake() *fakeTools {
	f := &fakeTools{handlers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){}, calls: map[string]int{}}
	f.handlers["fake__echo"] = func(_ context.Context, args json.RawMessage) (json.RawMessage, error) {
		var a struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(args, &a)
		return textResult("echo: " + a.Message), nil
	}
	return f
}

func textResult(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}})
	return b
}

func (f *fakeTools) List(context.Context) ([]model.Tool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var out []model.Tool
	for name := range f.handlers {
		server, tool, _ := strings.Cut(name, "__")
		out = append(out, model.Tool{Name: name, Server: server, Tool: tool, Description: "a fake tool",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}}}`)})
	}
	return out, nil
}

func (f *fakeTools) Call(ctx context.Context, server, tool string, args json.RawMessage) (json.RawMessage, error) {
	name := server + "__" + tool
	f.mu.Lock()
	h := f.handlers[name]
	f.calls[name]++
	f.args = append(f.args, name+" "+string(args))
	f.mu.Unlock()
	return h(ctx, args)
}

func (f *fakeTools) listed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeTools) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

// events records the published events.
type events struct {
	mu  sync.Mutex
	all []model.ChatEvent
}

func (e *events) publish(ev model.ChatEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) toolStates(tool string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.all {
		if ev.Kind == model.ChatEventToolCall && ev.ToolCall.Tool == tool {
			out = append(out, ev.ToolCall.State)
		}
	}
	return out
}

func (e *events) text() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.all {
		if ev.Kind == model.ChatEventTextDelta {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

type harness struct {
	log   *conversation.Log
	js    jetstream.JetStream
	srv   *llmtest.Server
	tools loop.ToolCaller
	fake  *fakeTools
	ev    *events
	eng   *loop.Engine
	prof  model.Profile
}

func newModel(p model.Profile) (provider.Model, error) {
	return provider.New(provider.Config{Provider: p.Provider, Model: p.Model, BaseURL: p.BaseURL, APIKey: "sk-test"})
}

func setup(t *testing.T, api string, mod func(*loop.Deps)) *harness {
	t.Helper()
	l, js := openLog(t)
	srv := llmtest.Start(t, "sk-test")
	h := &harness{log: l, js: js, srv: srv, fake: newFake(), ev: &events{}}
	h.tools = h.fake
	h.prof = model.Profile{Name: "p", Provider: api, Model: "m", MaxSteps: 20}
	if api == model.ChatProviderOpenAI {
		h.prof.BaseURL = srv.OpenAIBaseURL()
	} else {
		h.prof.BaseURL = srv.URL
	}
	d := loop.Deps{Log: l, Tools: h.fake, Model: newModel, Publish: h.ev.publish, CallTimeout: 5 * time.Second}
	if mod != nil {
		mod(&d)
	}
	h.eng = loop.New(d)
	return h
}

func (h *harness) entries(t *testing.T, conv string) []model.ChatEntry {
	t.Helper()
	es, err := h.log.Read(ctxT(t), conv)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func (h *harness) results(t *testing.T, conv string) []loop.ToolResult {
	t.Helper()
	var out []loop.ToolResult
	for _, e := range h.entries(t, conv) {
		if e.Kind == model.EntryToolResult {
			var r loop.ToolResult
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
	}
	return out
}

func kinds(es []model.ChatEntry) string {
	var k []string
	for _, e := range es {
		k = append(k, e.Kind)
	}
	return strings.Join(k, ",")
}

// A final answer the provider cut short says so in turn_end (the /v1
// finish_reason "length" comes from it).
func TestFinalAnswerKeepsItsStopReason(t *testing.T) {
	for _, api := range []string{model.ChatProviderOpenAI, model.ChatProviderAnthropic} {
		t.Run(api, func(t *testing.T) {
			h := setup(t, api, nil)
			h.srv.Enqueue(llmtest.Reply{Text: "The answer is", Truncated: true})
			done, err := h.eng.RunTurn(ctxT(t), "conv1", h.prof, "a long answer please")
			if err != nil || done.Reason != model.TurnFinal || done.StopReason != model.ChatStopMaxTokens {
				t.Fatalf("done %+v, %v", done, err)
			}
			h.srv.Enqueue(llmtest.Text("Done."))
			if done, err = h.eng.RunTurn(ctxT(t), "conv1", h.prof, "go on"); err != nil || done.StopReason != model.ChatStopEndTurn {
				t.Fatalf("done %+v, %v", done, err)
			}
		})
	}
}

func TestMultiStep(t *testing.T) {
	for _, api := range []string{model.ChatProviderOpenAI, model.ChatProviderAnthropic} {
		t.Run(api, func(t *testing.T) {
			h := setup(t, api, nil)
			h.prof.SystemPrompt = "You are terse."
			h.srv.Enqueue(
				llmtest.ToolCalls(llmtest.ToolCall{ID: "c1", Name: "fake__echo", Arguments: `{"message":"hi"}`}),
				llmtest.Text("The tool said hi."))
			done, err := h.eng.RunTurn(ctxT(t), "conv1", h.prof, "say hi through the tool")
			if err != nil {
				t.Fatal(err)
			}
			if done.Reason != model.TurnFinal || done.Message != "The tool said hi." || done.Steps != 2 {
				t.Fatalf("done %+v", done)
			}
			if got := kinds(h.entries(t, "conv1")); got != "user_message,model_step,tool_result,model_step,turn_end" {
				t.Fatalf("entries %s", got)
			}
			reqs := h.srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			first, second := string(reqs[0].Body), string(reqs[1].Body)
			if !strings.Contains(first, "fake__echo") || !strings.Contains(first, "You are terse.") || !strings.Contains(first, "say hi through the tool") {
				t.Fatalf("first request lacks the tools, system or message: %s", first)
			}
			if !strings.Contains(second, "echo: hi") || !strings.Contains(second, `"c1"`) {
				t.Fatalf("the tool result did not go back to the model: %s", second)
			}
			if got := strings.Join(h.ev.toolStates("fake__echo"), ","); got != "started,completed" {
				t.Fatalf("tool events %s", got)
			}
			if h.ev.text() != "The tool said hi." {
				t.Fatalf("streamed text %q", h.ev.text())
			}
			// A second turn sees the first one's history.
			h.srv.Enqueue(llmtest.Text("again"))
			if done, err := h.eng.RunTurn(ctxT(t), "conv1", h.prof, "again?"); err != nil || done.Reason != model.TurnFinal {
				t.Fatalf("second turn %+v %v", done, err)
			}
			if last := string(h.srv.Last().Body); !strings.Contains(last, "echo: hi") || !strings.Contains(last, "again?") {
				t.Fatalf("second turn's request lacks the history: %s", last)
			}
		})
	}
}

func TestParallelCalls(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	h.fake.handlers["fake__wait"] = func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
		started.Done()
		select {
		case <-both: // both calls run at once
			return textResult("waited " + string(args)), nil
		case <-time.After(3 * time.Second):
			return nil, errors.New("the other call never started")
		}
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__wait", `{"n":1}`), llmtest.Call("fake__wait", `{"n":2}`)), llmtest.Text("both done"))
	done, err := h.eng.RunTurn(ctxT(t), "par", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, "par")
	if len(rs) != 2 || rs[0].IsError || rs[1].IsError {
		t.Fatalf("results %+v", rs)
	}
	if body := string(h.srv.Last().Body); !strings.Contains(body, `waited {\"n\":1}`) || !strings.Contains(body, `waited {\"n\":2}`) {
		t.Fatalf("results not sent back: %s", body)
	}
}

func TestUnknownToolAndInvalidArgs(t *testing.T) {
	// OpenAI passes arguments through verbatim (Anthropic's stream decoder
	// repairs them), so the invalid JSON reaches the loop.
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.srv.Enqueue(
		llmtest.ToolCalls(llmtest.Call("nope__x", `{}`), llmtest.Call("fake__echo", `{"message": "unterminated`)),
		llmtest.ToolCalls(llmtest.Call("fake__echo", `{"message":"fixed"}`)),
		llmtest.Text("ok"))
	done, err := h.eng.RunTurn(ctxT(t), "bad", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal || done.Steps != 3 {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, "bad")
	if len(rs) != 3 {
		t.Fatalf("results %+v", rs)
	}
	byTool := map[string][]loop.ToolResult{}
	for _, r := range rs {
		byTool[r.Tool] = append(byTool[r.Tool], r)
	}
	if r := byTool["nope__x"]; len(r) != 1 || !r[0].IsError || !strings.Contains(r[0].Content, `Unknown tool "nope__x"`) || !strings.Contains(r[0].Content, "fake__echo") {
		t.Fatalf("unknown tool result %+v", r)
	}
	if r := byTool["fake__echo"]; len(r) != 2 || !r[0].IsError || !strings.Contains(r[0].Content, "Invalid arguments") || r[1].IsError || r[1].Content != "echo: fixed" {
		t.Fatalf("echo results %+v", r)
	}
	if n := h.fake.count("fake__echo"); n != 1 {
		t.Fatalf("echo called %d times, want 1 (the invalid call must not run)", n)
	}
	if body := string(h.srv.Requests()[1].Body); !strings.Contains(body, "Unknown tool") || !strings.Contains(body, "Invalid arguments") {
		t.Fatalf("errors not sent back as tool errors: %s", body)
	}
}

// TestCatalogOfTheStep: a step's calls are resolved in the catalog the step
// was offered (listed once per step), and in the live one for a name it
// lacks.
func TestCatalogOfTheStep(t *testing.T) {
	var h *harness
	var once sync.Once
	h = setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) {
		d.Publish = func(ev model.ChatEvent) {
			// A tool appears after the first step's listing, before its calls run.
			if ev.Kind == model.ChatEventUsage && ev.Conversation == "cat2" {
				once.Do(func() {
					h.fake.mu.Lock()
					h.fake.handlers["late__t"] = h.fake.handlers["fake__echo"]
					h.fake.mu.Unlock()
				})
			}
		}
	})
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__echo", `{"message":"a"}`)), llmtest.Text("done"))
	if done, err := h.eng.RunTurn(ctxT(t), "cat1", h.prof, "go"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if n := h.fake.listed(); n != 2 {
		t.Fatalf("catalog listed %d times for 2 steps", n)
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("late__t", `{"message":"b"}`)), llmtest.Text("done"))
	if done, err := h.eng.RunTurn(ctxT(t), "cat2", h.prof, "go"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if rs := h.results(t, "cat2"); len(rs) != 1 || rs[0].IsError || rs[0].Content != "echo: b" {
		t.Fatalf("results %+v", rs)
	}
	if n := h.fake.listed(); n != 5 {
		t.Fatalf("catalog listed %d times, want 5 (the second turn's calls list it live)", n)
	}
}

func TestMaxSteps(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.prof.MaxSteps = 3
	for i := range 5 {
		h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__echo", fmt.Sprintf(`{"message":"%d"}`, i))))
	}
	done, err := h.eng.RunTurn(ctxT(t), "max", h.prof, "loop")
	if err != nil {
		t.Fatal(err)
	}
	if done.Reason != model.TurnMaxSteps || done.Steps != 3 || !strings.Contains(done.Message, "3 model steps") {
		t.Fatalf("done %+v", done)
	}
	if h.srv.Attempts() != 3 || h.fake.count("fake__echo") != 3 {
		t.Fatalf("%d model requests, %d calls", h.srv.Attempts(), h.fake.count("fake__echo"))
	}
	es := h.entries(t, "max")
	if last := es[len(es)-1]; last.Kind != model.EntryTurnEnd || !strings.Contains(string(last.Payload), "max_steps") {
		t.Fatalf("last entry %+v", last)
	}
}

func TestRepeatedCall(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	for range 4 {
		h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__echo", `{"message":"same"}`)))
	}
	done, err := h.eng.RunTurn(ctxT(t), "rep", h.prof, "loop")
	if err != nil {
		t.Fatal(err)
	}
	if done.Reason != model.TurnRepeated || !strings.Contains(done.Message, "fake__echo with the same arguments 3 times") {
		t.Fatalf("done %+v", done)
	}
	if n := h.fake.count("fake__echo"); n != 2 {
		t.Fatalf("echo ran %d times, want 2 (the third identical call is not run)", n)
	}
}

func TestBreaker(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.fake.handlers["down__q"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, apierr.New(apierr.ServiceUnavailable, "server down is restarting")
	}
	for i := range 4 {
		h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("down__q", fmt.Sprintf(`{"i":%d}`, i))))
	}
	h.srv.Enqueue(llmtest.Text("giving up"))
	done, err := h.eng.RunTurn(ctxT(t), "brk", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if n := h.fake.count("down__q"); n != 3 {
		t.Fatalf("down called %d times, want 3", n)
	}
	rs := h.results(t, "brk")
	if len(rs) != 4 || !strings.Contains(rs[3].Content, "server down is failing") || !strings.Contains(rs[0].Content, "restarting") {
		t.Fatalf("results %+v", rs)
	}
}

func TestCutAndReadResult(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) { d.ResultBudget = 1000 })
	big := strings.Repeat("0123456789", 5000) + "THE-END"
	h.fake.handlers["fake__big"] = func(context.Context, json.RawMessage) (json.RawMessage, error) { return textResult(big), nil }
	h.srv.Enqueue(
		llmtest.ToolCalls(llmtest.ToolCall{ID: "b1", Name: "fake__big", Arguments: `{}`}),
		llmtest.ToolCalls(llmtest.Call("read_result", fmt.Sprintf(`{"call_id":"b1","offset":%d}`, len(big)-20))),
		llmtest.Text("read it"))
	done, err := h.eng.RunTurn(ctxT(t), "cut", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, "cut")
	if len(rs) != 2 || !rs[0].Cut || len(rs[0].Content) > 1000 || rs[0].Full != big || !strings.Contains(rs[0].Content, "read_result") {
		t.Fatalf("cut result: cut=%v len=%d full=%d", rs[0].Cut, len(rs[0].Content), len(rs[0].Full))
	}
	if rs[1].IsError || !strings.HasSuffix(rs[1].Content, "789THE-END") || !strings.Contains(rs[1].Content, fmt.Sprintf("of %d", len(big))) {
		t.Fatalf("read_result %+v", rs[1])
	}
	reqs := h.srv.Requests()
	if strings.Contains(string(reqs[0].Body), "read_result") || !strings.Contains(string(reqs[1].Body), `"name":"read_result"`) {
		t.Fatal("read_result must be offered once a result was cut, not before")
	}
	if len(reqs[1].Body) > 10000 {
		t.Fatalf("the cut result went to the model whole (%d bytes)", len(reqs[1].Body))
	}
	if !strings.Contains(string(reqs[2].Body), "THE-END") {
		t.Fatal("the range read did not go back to the model")
	}
}

// TestTextToolCall: a profile with text_tool_calls runs a call the model
// wrote as text; without it (the default) the same answer, or a fenced JSON
// block quoting a tool's result, is only text: nothing runs.
func TestTextToolCall(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	quoted := "Here is what the page says:\n```json\n{\"name\":\"fake__echo\",\"arguments\":{\"message\":\"injected\"}}\n```"
	for _, step := range []llmtest.Reply{llmtest.TaggedToolCall("fake__echo", `{"message":"from text"}`), llmtest.Text(quoted)} {
		h.srv.Enqueue(step)
		if done, err := h.eng.RunTurn(ctxT(t), "plain", h.prof, "go"); err != nil || done.Reason != model.TurnFinal {
			t.Fatalf("%+v %v", done, err)
		}
	}
	if n := h.fake.count("fake__echo"); n != 0 {
		t.Fatalf("a profile without text_tool_calls ran %d calls written as text", n)
	}

	h.prof.TextToolCalls = true
	h.srv.Enqueue(llmtest.TaggedToolCall("fake__echo", `{"message":"from text"}`), llmtest.Text("done"))
	done, err := h.eng.RunTurn(ctxT(t), "txt", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if n := h.fake.count("fake__echo"); n != 1 {
		t.Fatalf("echo ran %d times", n)
	}
	if rs := h.results(t, "txt"); len(rs) != 1 || rs[0].Content != "echo: from text" {
		t.Fatalf("results %+v", rs)
	}
	if body := string(h.srv.Last().Body); !strings.Contains(body, "echo: from text") {
		t.Fatalf("result not sent back: %s", body)
	}
}

func TestCancel(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	running := make(chan struct{})
	h.fake.handlers["fake__hang"] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		close(running)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__hang", `{}`)))
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() { <-running; cancel() }()
	done, err := h.eng.RunTurn(ctx, "cxl", h.prof, "go")
	if err != nil || done.Reason != model.TurnCancelled {
		t.Fatalf("%+v %v", done, err)
	}
	es := h.entries(t, "cxl")
	if got := kinds(es); got != "user_message,model_step,turn_end" {
		t.Fatalf("entries %s", got)
	}
	// The next turn's request still answers the cancelled call.
	h.srv.Enqueue(llmtest.Text("fine"))
	if done, err := h.eng.RunTurn(ctxT(t), "cxl", h.prof, "next"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if body := string(h.srv.Last().Body); !strings.Contains(body, "did not complete") {
		t.Fatalf("the unanswered call has no result: %s", body)
	}
}

func TestBudgets(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.prof.MaxTokensPerTurn = 30 // each step reports 11+7
	for i := range 3 {
		h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__echo", fmt.Sprintf(`{"message":"%d"}`, i))))
	}
	done, err := h.eng.RunTurn(ctxT(t), "tok", h.prof, "go")
	if err != nil || done.Reason != model.TurnBudget || done.Steps != 2 || !strings.Contains(done.Message, "36 tokens") {
		t.Fatalf("%+v %v", done, err)
	}

	h.prof.MaxTokensPerTurn = 0
	h.prof.MaxTurnDuration = model.Duration(300 * time.Millisecond)
	h.srv.Enqueue(llmtest.Slow(llmtest.Text("a slow answer that never ends in time"), 200*time.Millisecond))
	done, err = h.eng.RunTurn(ctxT(t), "time", h.prof, "go")
	if err != nil || done.Reason != model.TurnBudget || !strings.Contains(done.Message, "time budget") {
		t.Fatalf("%+v %v", done, err)
	}
}

func TestApprovalPolicy(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.prof.Approval = model.ApprovalPolicy{Rules: []model.ApprovalRule{{Tool: "fake__echo", Decision: model.ApprovalDeny}, {Tool: "fake__ask", Decision: model.ApprovalAsk}}}
	h.fake.handlers["fake__ask"] = h.fake.handlers["fake__echo"]
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__echo", `{}`), llmtest.Call("fake__ask", `{}`)), llmtest.Text("ok"))
	if done, err := h.eng.RunTurn(ctxT(t), "appr", h.prof, "go"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if h.fake.count("fake__echo")+h.fake.count("fake__ask") != 0 {
		t.Fatal("a denied call ran")
	}
	for _, r := range h.results(t, "appr") {
		want := map[string]string{"fake__echo": "denied by policy", "fake__ask": "no approver"}[r.Tool]
		if !r.IsError || !strings.Contains(r.Content, want) {
			t.Fatalf("result %+v, want %q", r, want)
		}
	}
}

// appendRaw writes an entry as another (crashed) instance would have.
func appendRaw(t *testing.T, l *conversation.Log, conv, turn, kind string, payload any) {
	t.Helper()
	b, _ := json.Marshal(payload)
	if _, err := l.Append(ctxT(t), conv, model.ChatEntry{Kind: kind, Turn: turn, Payload: b}); err != nil {
		t.Fatal(err)
	}
}

func TestResumeRunsOnlyMissingCalls(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	const conv, turn = "crash", "t1"
	appendRaw(t, h.log, conv, turn, model.EntryUserMessage, loop.UserMessage{Text: "two echoes"})
	appendRaw(t, h.log, conv, turn, model.EntryModelStep, loop.ModelStep{Step: 1, ToolCalls: []loop.StepCall{
		{ID: "a", Name: "fake__echo", Arguments: `{"message":"one"}`},
		{ID: "b", Name: "fake__echo", Arguments: `{"message":"two"}`},
	}, Usage: loop.StepUsage{InputTokens: 5, OutputTokens: 5}})
	appendRaw(t, h.log, conv, turn, model.EntryToolResult, loop.ToolResult{CallID: "a", Tool: "fake__echo", Server: "fake", State: model.ToolCallCompleted, Content: "echo: one"})
	// ...and the instance died.

	h.srv.Enqueue(llmtest.Text("one and two"))
	done, err := h.eng.Resume(ctxT(t), conv, h.prof)
	if err != nil || done.Reason != model.TurnFinal || done.Steps != 2 {
		t.Fatalf("%+v %v", done, err)
	}
	if n := h.fake.count("fake__echo"); n != 1 || h.fake.args[0] != `fake__echo {"message":"two"}` {
		t.Fatalf("echo ran %d times (%v), want only the missing call", n, h.fake.args)
	}
	es := h.entries(t, conv)
	if got := kinds(es); got != "user_message,model_step,tool_result,tool_result,model_step,turn_end" {
		t.Fatalf("entries %s", got)
	}
	for _, e := range es {
		if e.Turn != turn {
			t.Fatalf("entry %d of turn %s", e.Seq, e.Turn)
		}
	}
	body := string(h.srv.Last().Body)
	if !strings.Contains(body, "echo: one") || !strings.Contains(body, "echo: two") {
		t.Fatalf("both results must go to the model: %s", body)
	}
	// An ended turn is not run again.
	again, err := h.eng.Resume(ctxT(t), conv, h.prof)
	if err != nil || again != done || h.srv.Attempts() != 1 {
		t.Fatalf("resume of an ended turn: %+v %v", again, err)
	}
}

func TestConflictBetweenEngines(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	other := loop.New(loop.Deps{Log: h.log, Tools: h.fake, Model: newModel})
	var once sync.Once
	var otherDone model.ChatDone
	var otherErr error
	h.fake.handlers["fake__slow"] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		first := false
		once.Do(func() { first = true })
		if first {
			// While the first engine runs this call, a second one takes the
			// turn over (as after a lost lease) and finishes it.
			otherDone, otherErr = other.Resume(ctx, "race", h.prof)
		}
		return textResult("slow done"), nil
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__slow", `{}`)), llmtest.Text("finished by the other"))
	_, err := h.eng.RunTurn(ctxT(t), "race", h.prof, "go")
	if apierr.Of(err) != apierr.Conflict {
		t.Fatalf("first engine: %v, want CONFLICT", err)
	}
	if otherErr != nil || otherDone.Reason != model.TurnFinal {
		t.Fatalf("second engine: %+v %v", otherDone, otherErr)
	}
	if got := kinds(h.entries(t, "race")); got != "user_message,model_step,tool_result,model_step,turn_end" {
		t.Fatalf("entries %s", got)
	}
}

// TestConflictBetweenSteps: another writer appends to the conversation
// while a running turn waits for its second model step. The turn keeps the
// log in memory, so its copy is stale: its next append must fail with
// CONFLICT and stop the turn, never continue on the stale copy.
func TestConflictBetweenSteps(t *testing.T) {
	const conv = "between"
	var h *harness
	var once sync.Once
	var otherErr error
	h = setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) {
		d.Publish = func(ev model.ChatEvent) {
			// The text of the second step streams before it is appended.
			if ev.Kind == model.ChatEventTextDelta {
				once.Do(func() {
					b, _ := json.Marshal(loop.UserMessage{Text: "meanwhile"})
					_, otherErr = h.log.Append(ctxT(t), conv, model.ChatEntry{Kind: model.EntryUserMessage, Turn: "other", Payload: b})
				})
			}
		}
	})
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__echo", `{"message":"x"}`)), llmtest.Text("never written"), llmtest.Text("nor this"))
	done, err := h.eng.RunTurn(ctxT(t), conv, h.prof, "go")
	if apierr.Of(err) != apierr.Conflict {
		t.Fatalf("turn: %+v %v, want CONFLICT", done, err)
	}
	if otherErr != nil {
		t.Fatal(otherErr)
	}
	es := h.entries(t, conv)
	if got := kinds(es); got != "user_message,model_step,tool_result,user_message" || es[3].Turn != "other" {
		t.Fatalf("entries %s (last of turn %s)", got, es[len(es)-1].Turn)
	}
	if n := h.srv.Attempts(); n != 2 {
		t.Fatalf("%d model requests, want 2", n)
	}

	// The same when the other write lands between Begin and Drive.
	tn, err := h.eng.Begin(ctxT(t), conv, h.prof, "again", loop.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	appendRaw(t, h.log, conv, "other2", model.EntryUserMessage, loop.UserMessage{Text: "meanwhile"})
	if _, err := tn.Drive(ctxT(t)); apierr.Of(err) != apierr.Conflict {
		t.Fatalf("drive: %v, want CONFLICT", err)
	}
	if got := kinds(h.entries(t, conv)); got != "user_message,model_step,tool_result,user_message,user_message,user_message" {
		t.Fatalf("entries %s", got)
	}
}

func TestModelError(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.srv.Enqueue(llmtest.Error(400))
	done, err := h.eng.RunTurn(ctxT(t), "err", h.prof, "go")
	if err != nil || done.Reason != model.TurnError || done.Message == "" {
		t.Fatalf("%+v %v", done, err)
	}
	if _, err := h.eng.RunTurn(ctxT(t), "err", h.prof, "  "); apierr.Of(err) != apierr.Validation {
		t.Fatalf("empty message: %v", err)
	}
}

// TestRealTools drives a turn whose tool call goes over the bus to a runner
// running the go-sdk test MCP server, through libs/client.
// realTools runs a bus with a runner serving the go-sdk test server as
// "tm", and opens the conversation log on it.
func realTools(t *testing.T) (*runnertest.Env, *conversation.Log) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs a test MCP server")
	}
	bin, cleanup, err := runnertest.BuildTestServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := runnertest.Start(t, runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		StartTimeout: 10 * time.Second, Logger: quiet})
	e.Put(t, runnertest.Binary("tm", bin, "-name", "tm"))
	e.WaitState(t, "tm", model.StateRunning, 15*time.Second)
	l, err := conversation.Open(ctxT(t), e.JS, conversation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return e, l
}

func TestRealTools(t *testing.T) {
	e, l := realTools(t)
	srv := llmtest.Start(t, "sk-test")
	ev := &events{}
	eng := loop.New(loop.Deps{Log: l, Tools: loop.ClientTools{C: e.Client}, Model: newModel, Publish: ev.publish, CallTimeout: 10 * time.Second})
	prof := model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: srv.OpenAIBaseURL(),
		ToolFilter: model.ChatToolFilter{Include: []string{"tm__echo"}}}
	srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "r1", Name: "tm__echo", Arguments: `{"message":"over the bus"}`}), llmtest.Text("it echoed"))
	done, err := eng.RunTurn(ctxT(t), "real", prof, "echo something")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	first := string(srv.Requests()[0].Body)
	if !strings.Contains(first, `"name":"tm__echo"`) || strings.Contains(first, "tm__sleep") {
		t.Fatalf("the filtered live catalog was not offered: %s", first)
	}
	if body := string(srv.Last().Body); !strings.Contains(body, "over the bus") || !strings.Contains(body, `"r1"`) {
		t.Fatalf("the real result did not go back: %s", body)
	}
	if got := strings.Join(ev.toolStates("tm__echo"), ","); got != "started,completed" {
		t.Fatalf("events %s", got)
	}
}

type approver struct {
	decision string
	asked    []model.ChatToolCall
	ctx      context.Context // the last Ask's
}

func (a *approver) Ask(ctx context.Context, _ string, call model.ChatToolCall, _ model.Tool, asked func()) (string, error) {
	asked()
	a.asked = append(a.asked, call)
	a.ctx = ctx
	return a.decision, nil
}

func TestApproverHook(t *testing.T) {
	ap := &approver{decision: model.DecisionApprove}
	h := setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) { d.Approver = ap })
	h.prof.Approval = model.ApprovalPolicy{Default: model.ApprovalAsk}
	// The approval is asked under a context that lasts while the call
	// runs and ends with it, marked so an approval left for the runner is
	// consumed then (libs/approvals, Sweeping).
	echo := h.fake.handlers["fake__echo"]
	var liveDuringCall bool
	h.fake.handlers["fake__echo"] = func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
		liveDuringCall = ap.ctx != nil && ap.ctx.Err() == nil
		return echo(ctx, args)
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "q1", Name: "fake__echo", Arguments: `{"message":"ok?"}`}), llmtest.Text("ok"))
	if done, err := h.eng.RunTurn(ctxT(t), "ask", h.prof, "go"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if !liveDuringCall || ap.ctx.Err() == nil || !approvals.Sweeps(ap.ctx) {
		t.Fatalf("the approval's context: live during the call %v, ended after it %v, sweeps %v; want true, true, true", liveDuringCall, ap.ctx.Err() != nil, approvals.Sweeps(ap.ctx))
	}
	if len(ap.asked) != 1 || ap.asked[0].CallID != "q1" || h.fake.count("fake__echo") != 1 {
		t.Fatalf("asked %+v, calls %d", ap.asked, h.fake.count("fake__echo"))
	}
	if got := kinds(h.entries(t, "ask")); got != "user_message,model_step,approval,tool_result,model_step,turn_end" {
		t.Fatalf("entries %s", got)
	}
	if got := strings.Join(h.ev.toolStates("fake__echo"), ","); got != "awaiting_approval,started,completed" {
		t.Fatalf("events %s", got)
	}
}
