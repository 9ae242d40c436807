package loop_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// syncApprover approves every call and records what it was asked, from the
// parallel calls of a step.
type syncApprover struct {
	mu    sync.Mutex
	asked []model.ChatToolCall
}

func (a *syncApprover) Ask(_ context.Context, _ string, call model.ChatToolCall, _ model.Tool, asked func()) (string, error) {
	asked()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, call)
	return model.DecisionApprove, nil
}

// A model reusing a call id of an earlier step still has its call run:
// the id is the loop's key of results, so the reused one would have passed
// for answered and never run.
func TestReusedCallIDStillRuns(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.srv.Enqueue(
		llmtest.ToolCalls(llmtest.ToolCall{ID: "dup", Name: "fake__echo", Arguments: `{"message":"one"}`}),
		llmtest.ToolCalls(llmtest.ToolCall{ID: "dup", Name: "fake__echo", Arguments: `{"message":"two"}`}),
		llmtest.Text("ok"))
	done, err := h.eng.RunTurn(ctxT(t), "reuse", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, "reuse")
	if h.fake.count("fake__echo") != 2 || len(rs) != 2 || rs[0].CallID == rs[1].CallID {
		t.Fatalf("calls %d, results %+v: want 2 calls with results of distinct ids", h.fake.count("fake__echo"), rs)
	}
	if body := string(h.srv.Last().Body); !strings.Contains(body, "echo: two") {
		t.Fatalf("the second call's result did not go back: %s", body)
	}
}

// Two calls of one step under one id are asked about (and answered) each
// on its own: one id would bind the user's approval of one to the other.
func TestDuplicateCallIDsAskedApart(t *testing.T) {
	ap := &syncApprover{}
	h := setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) { d.Approver = ap })
	h.prof.Approval = model.ApprovalPolicy{Default: model.ApprovalAsk}
	h.srv.Enqueue(
		llmtest.ToolCalls(
			llmtest.ToolCall{ID: "same", Name: "fake__echo", Arguments: `{"message":"harmless"}`},
			llmtest.ToolCall{ID: "same", Name: "fake__echo", Arguments: `{"message":"other"}`}),
		llmtest.Text("ok"))
	done, err := h.eng.RunTurn(ctxT(t), "twins", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if len(ap.asked) != 2 || ap.asked[0].CallID == ap.asked[1].CallID {
		t.Fatalf("asked %+v: want two asks with distinct call ids", ap.asked)
	}
	if rs := h.results(t, "twins"); len(rs) != 2 || rs[0].CallID == rs[1].CallID {
		t.Fatalf("results %+v", rs)
	}
}

// A reply too large for the log ends the turn with an error. Taken whole,
// its model_step could not be appended (past the bus's max_payload): the
// turn stopped without a turn_end, and the chat service resumed it, asking
// the model again, every lease TTL.
func TestHugeReplyEndsTheTurn(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.srv.Always(llmtest.Text(strings.Repeat("x", 9<<20)))
	done, err := h.eng.RunTurn(ctxT(t), "huge", h.prof, "go")
	if err != nil || done.Reason != model.TurnError || !strings.Contains(done.Message, "more than") {
		t.Fatalf("done %+v, err %v: want the turn ended with an error", done, err)
	}
	if got := kinds(h.entries(t, "huge")); got != "user_message,turn_end" {
		t.Fatalf("entries %s", got)
	}
}

// Negative (or absurd) token counts from the provider do not lift the
// turn's budget, nor reach the usage events.
func TestNegativeUsageKeepsTheBudget(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.prof.MaxTokensPerTurn = 100
	h.srv.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{llmtest.Call("fake__echo", `{"message":"1"}`)}, Usage: &llmtest.Usage{InputTokens: -1_000_000, OutputTokens: 60}},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{llmtest.Call("fake__echo", `{"message":"2"}`)}, Usage: &llmtest.Usage{InputTokens: 50, OutputTokens: 10}},
		llmtest.Text("past the budget"))
	done, err := h.eng.RunTurn(ctxT(t), "neg", h.prof, "go")
	if err != nil || done.Reason != model.TurnBudget || done.Steps != 2 {
		t.Fatalf("done %+v, %v: want the budget to end the turn after 2 steps", done, err)
	}
	h.ev.mu.Lock()
	defer h.ev.mu.Unlock()
	for _, ev := range h.ev.all {
		if u := ev.Usage; u != nil && (u.InputTokens < 0 || u.OutputTokens < 0) {
			t.Fatalf("usage event %+v", *u)
		}
	}
}

// A provider that stops sending ends the turn at the step timeout, though
// the profile sets no max_turn_duration.
func TestStalledProviderTimesOut(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) { d.StepTimeout = 300 * time.Millisecond })
	h.srv.Enqueue(llmtest.Slow(llmtest.Text("never"), time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done, err := h.eng.RunTurn(ctx, "stall", h.prof, "go")
	if err != nil || done.Reason != model.TurnError || !strings.Contains(done.Message, "did not finish its step") {
		t.Fatalf("done %+v, %v: want the turn ended at the step timeout", done, err)
	}
}

// Tool calls written as text are bounded like structured ones: an answer
// (or a quoted tool result) full of <tool_call> tags runs none of them.
func TestTooManyTextToolCalls(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.prof.TextToolCalls = true
	var b strings.Builder
	for i := range provider.MaxToolCalls + 1 {
		fmt.Fprintf(&b, `<tool_call>{"name":"fake__echo","arguments":{"message":"%d"}}</tool_call>`, i)
	}
	h.srv.Enqueue(llmtest.Text(b.String()))
	done, err := h.eng.RunTurn(ctxT(t), "many", h.prof, "go")
	if err != nil || done.Reason != model.TurnError || h.fake.count("fake__echo") != 0 {
		t.Fatalf("done %+v, %v, %d calls: want the turn ended before any call", done, err, h.fake.count("fake__echo"))
	}
}
