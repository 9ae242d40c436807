package loop_test

import (
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// A turn begun with NoTools (OpenAI's tool_choice "none") offers the model
// no tool, and a tool call the model writes anyway, as a structured call or
// as text, is not run: the step is the turn's answer.
func TestNoToolsOffersAndRunsNone(t *testing.T) {
	for _, api := range []string{model.ChatProviderOpenAI, model.ChatProviderAnthropic} {
		t.Run(api, func(t *testing.T) {
			h := setup(t, api, nil)
			h.prof.TextToolCalls = true
			h.srv.Enqueue(llmtest.Reply{Text: "I would echo it.", ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "fake__echo", Arguments: `{"message":"hi"}`}}})
			tr, err := h.eng.Begin(ctxT(t), "nt1", h.prof, "echo hi", loop.BeginOptions{NoTools: true})
			if err != nil {
				t.Fatal(err)
			}
			done, err := tr.Drive(ctxT(t))
			if err != nil || done.Reason != model.TurnFinal || done.Message != "I would echo it." || done.Steps != 1 {
				t.Fatalf("done %+v, %v", done, err)
			}
			if n := h.fake.count("fake__echo"); n != 0 {
				t.Fatalf("the tool ran %d times in a turn without tools", n)
			}
			if got := kinds(h.entries(t, "nt1")); got != "user_message,model_step,turn_end" {
				t.Fatalf("entries %s", got)
			}
			if body := string(h.srv.Last().Body); strings.Contains(body, "fake__echo") || strings.Contains(body, `"tools"`) {
				t.Fatalf("the model was offered tools: %s", body)
			}

			// A call written as text is not run either.
			h.srv.Enqueue(llmtest.Text(`<tool_call>{"name":"fake__echo","arguments":{"message":"x"}}</tool_call>`))
			if tr, err = h.eng.Begin(ctxT(t), "nt2", h.prof, "echo x", loop.BeginOptions{NoTools: true}); err != nil {
				t.Fatal(err)
			}
			if done, err = tr.Drive(ctxT(t)); err != nil || done.Reason != model.TurnFinal || done.Steps != 1 || h.fake.count("fake__echo") != 0 {
				t.Fatalf("done %+v, %v; echo ran %d times", done, err, h.fake.count("fake__echo"))
			}
		})
	}
}

// A resumed turn keeps NoTools (it is in the logged user message).
func TestNoToolsSurvivesResume(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	appendRaw(t, h.log, "nt3", "t1", model.EntryUserMessage, loop.UserMessage{Text: "echo hi", Profile: h.prof.Name, NoTools: true})
	h.srv.Enqueue(llmtest.Reply{Text: "no tools here", ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "fake__echo", Arguments: `{"message":"hi"}`}}})
	done, err := h.eng.Resume(ctxT(t), "nt3", h.prof)
	if err != nil || done.Reason != model.TurnFinal || done.Message != "no tools here" {
		t.Fatalf("done %+v, %v", done, err)
	}
	if n := h.fake.count("fake__echo"); n != 0 {
		t.Fatalf("the tool ran %d times in a resumed turn without tools", n)
	}
	if body := string(h.srv.Last().Body); strings.Contains(body, `"tools"`) {
		t.Fatalf("the resumed turn offered tools: %s", body)
	}
}
