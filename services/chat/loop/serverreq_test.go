package loop_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// A server that samples during a turn's tool call is answered by the
// profile's model when the profile allows it, refused otherwise; a server
// that asks the user for input (elicitation) is declined when the engine
// has no one to ask (Deps.Inputs nil; elicit_test.go covers asking).
func TestServerRequestsDuringATurn(t *testing.T) {
	e, l := realTools(t)
	srv := llmtest.Start(t, "sk-test")
	eng := loop.New(loop.Deps{Log: l, Tools: loop.ClientTools{C: e.Client}, Model: newModel, CallTimeout: 10 * time.Second})
	prof := model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: srv.OpenAIBaseURL(),
		ToolFilter: model.ChatToolFilter{Include: []string{"tm__sample", "tm__ask"}}, Sampling: model.SamplingAllow}

	srv.Enqueue(
		llmtest.ToolCalls(llmtest.ToolCall{ID: "s1", Name: "tm__sample", Arguments: `{"message":"sky colour?"}`}),
		llmtest.Text("blue"), // the server's sampling request
		llmtest.Text("the server heard blue"))
	done, err := eng.RunTurn(ctxT(t), "sampling", prof, "ask the server")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 || !strings.Contains(string(reqs[1].Body), "sky colour?") || strings.Contains(string(reqs[1].Body), `"tools"`) {
		t.Fatalf("the sampling request did not reach the model as a plain completion: %d requests, second %s", len(reqs), reqs[1].Body)
	}
	if body := string(srv.Last().Body); !strings.Contains(body, "m said: blue") {
		t.Fatalf("the sampled answer did not reach the tool result: %s", body)
	}

	prof.Sampling = ""
	srv.Enqueue(
		llmtest.ToolCalls(llmtest.ToolCall{ID: "s2", Name: "tm__sample", Arguments: `{"message":"sky colour?"}`}),
		llmtest.Text("no sampling then"))
	if done, err := eng.RunTurn(ctxT(t), "no-sampling", prof, "ask the server"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if body := string(srv.Last().Body); !strings.Contains(body, "does not let servers sample its model") {
		t.Fatalf("the refusal did not reach the model: %s", body)
	}

	srv.Enqueue(
		llmtest.ToolCalls(llmtest.ToolCall{ID: "a1", Name: "tm__ask", Arguments: `{"message":"Your name?"}`}),
		llmtest.Text("it wanted a name"))
	if done, err := eng.RunTurn(ctxT(t), "elicit", prof, "ask the server"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if body := string(srv.Last().Body); !strings.Contains(body, "the user chose decline") {
		t.Fatalf("the declined elicitation did not reach the model: %s", body)
	}
}
