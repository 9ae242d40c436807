package loop_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// TestSenderFilterNarrowsProfile: the sender's own tool filter and the
// profile's both apply — the model is offered only what both allow, a call
// of anything else is refused unrun, also in a resumed turn (the sender is
// in the log) — and the allowed calls carry the sender as their principal.
func TestSenderFilterNarrowsProfile(t *testing.T) {
	var seen []string
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.fake.handlers["fake__other"] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		p, _ := principal.From(ctx)
		seen = append(seen, p.ID)
		return textResult("other ran"), nil
	}
	sender := principal.Key("k1", false, model.ToolFilter{Deny: []string{"fake__echo"}})

	h.srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "e1", Name: "fake__echo", Arguments: `{"message":"no"}`},
		llmtest.ToolCall{ID: "o1", Name: "fake__other", Arguments: `{}`}), llmtest.Text("done"))
	turn, err := h.eng.Begin(ctxT(t), "narrow", h.prof, "go", loop.BeginOptions{Sender: &sender})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := turn.Drive(ctxT(t)); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	first := string(h.srv.Requests()[0].Body)
	if strings.Contains(first, `"fake__echo"`) || !strings.Contains(first, `"fake__other"`) {
		t.Fatalf("offered the wrong tools: %s", first)
	}
	if n := h.fake.count("fake__echo"); n != 0 {
		t.Fatalf("fake__echo ran %d times for a sender that may not", n)
	}
	if len(seen) != 1 || seen[0] != "key:k1" {
		t.Fatalf("fake__other ran for %q, want once for key:k1", seen)
	}
	res := h.results(t, "narrow")
	if len(res) != 2 {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.Tool == "fake__echo" && (!r.IsError || !strings.Contains(r.Content, "Unknown tool")) {
			t.Fatalf("fake__echo's result %+v, want refused as unknown", r)
		}
	}

	// A turn resumed by another instance keeps the logged sender's filter.
	const conv, turnID = "resumed", "t1"
	appendRaw(t, h.log, conv, turnID, model.EntryUserMessage, loop.UserMessage{Text: "go", Profile: "p", Sender: &sender})
	appendRaw(t, h.log, conv, turnID, model.EntryModelStep, loop.ModelStep{Step: 1, ToolCalls: []loop.StepCall{
		{ID: "e2", Name: "fake__echo", Arguments: `{"message":"still no"}`}}})
	h.srv.Enqueue(llmtest.Text("resumed"))
	if done, err := h.eng.Resume(ctxT(t), conv, h.prof); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if n := h.fake.count("fake__echo"); n != 0 {
		t.Fatalf("the resumed turn ran fake__echo %d times", n)
	}
}
