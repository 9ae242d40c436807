package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// offered are the tool names of a model request (either API).
func offered(r llmtest.Request) []string {
	var body struct {
		Tools []struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(r.Body, &body)
	var out []string
	for _, tl := range body.Tools {
		out = append(out, tl.Name+tl.Function.Name)
	}
	slices.Sort(out)
	return out
}

// TestSearchModeAboveBudget: a catalog above the profile's tool budget is
// offered as search_tools alone; the tools a search finds are offered by
// name in the next steps (of this turn and the next) and run when called;
// a tool the profile or the sender filters out is neither found nor run.
func TestSearchModeAboveBudget(t *testing.T) {
	for _, api := range []string{model.ChatProviderOpenAI, model.ChatProviderAnthropic} {
		t.Run(api, func(t *testing.T) {
			h := setup(t, api, nil)
			ok := func(text string) func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return func(context.Context, json.RawMessage) (json.RawMessage, error) { return textResult(text), nil }
			}
			for i := range model.DefaultChatToolBudget {
				h.fake.handlers[fmt.Sprintf("noise__tool_%d", i)] = ok("noise")
			}
			h.fake.handlers["weather__forecast"] = ok("sunny")
			h.fake.handlers["hidden__forecast"] = ok("profile-filtered ran")
			h.fake.handlers["secret__forecast"] = ok("sender-filtered ran")
			h.prof.ToolFilter.Exclude = []string{"hidden__*"}
			sender := principal.Key("k1", false, model.ToolFilter{Deny: []string{"secret__*"}})

			h.srv.Enqueue(
				llmtest.ToolCalls(llmtest.ToolCall{ID: "s1", Name: loop.SearchToolsTool, Arguments: `{"query":"forecast"}`}),
				llmtest.ToolCalls(llmtest.ToolCall{ID: "w1", Name: "weather__forecast", Arguments: `{}`},
					llmtest.ToolCall{ID: "x1", Name: "secret__forecast", Arguments: `{}`},
					llmtest.ToolCall{ID: "x2", Name: "hidden__forecast", Arguments: `{}`}),
				llmtest.Text("sunny it is"))
			turn, err := h.eng.Begin(ctxT(t), "search", h.prof, "weather?", loop.BeginOptions{Sender: &sender})
			if err != nil {
				t.Fatal(err)
			}
			if done, err := turn.Drive(ctxT(t)); err != nil || done.Reason != model.TurnFinal || done.Message != "sunny it is" {
				t.Fatalf("%+v %v", done, err)
			}
			reqs := h.srv.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d model requests, want 3", len(reqs))
			}
			if got := offered(reqs[0]); !slices.Equal(got, []string{loop.SearchToolsTool}) {
				t.Fatalf("first step offered %v, want search_tools only", got)
			}
			if got := offered(reqs[1]); !slices.Equal(got, []string{loop.SearchToolsTool, "weather__forecast"}) {
				t.Fatalf("after the search the step offered %v, want search_tools and the tool found", got)
			}
			res := map[string]loop.ToolResult{}
			for _, r := range h.results(t, "search") {
				res[r.CallID] = r
			}
			s := res["s1"]
			if s.IsError || !slices.Equal(s.Found, []string{"weather__forecast"}) || !strings.Contains(s.Content, "weather__forecast") ||
				strings.Contains(s.Content, "secret__") || strings.Contains(s.Content, "hidden__") {
				t.Fatalf("search result %+v: want weather__forecast only", s)
			}
			if w := res["w1"]; w.IsError || w.Content != "sunny" {
				t.Fatalf("the found tool's result %+v", w)
			}
			for _, id := range []string{"x1", "x2"} {
				if r := res[id]; !r.IsError || !strings.Contains(r.Content, "Unknown tool") || !strings.Contains(r.Content, loop.SearchToolsTool) {
					t.Fatalf("a filtered tool's call %s got %+v, want refused as unknown", id, r)
				}
			}
			for _, n := range []string{"secret__forecast", "hidden__forecast"} {
				if c := h.fake.count(n); c != 0 {
					t.Fatalf("%s ran %d times", n, c)
				}
			}
			if got := h.ev.toolStates(loop.SearchToolsTool); !slices.Equal(got, []string{model.ToolCallCompleted}) {
				t.Fatalf("search_tools events %v", got)
			}

			// The next turn of the conversation still offers what was found.
			h.srv.Enqueue(llmtest.Text("again"))
			turn, err = h.eng.Begin(ctxT(t), "search", h.prof, "and tomorrow?", loop.BeginOptions{Sender: &sender})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := turn.Drive(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if got := offered(h.srv.Last()); !slices.Equal(got, []string{loop.SearchToolsTool, "weather__forecast"}) {
				t.Fatalf("the next turn offered %v", got)
			}
		})
	}
}

// TestWithinBudgetNoSearch: a catalog within the budget is offered whole,
// without search_tools; a budget set on the profile moves the line.
func TestWithinBudgetNoSearch(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	h.fake.handlers["fake__other"] = h.fake.handlers["fake__echo"]
	h.srv.Enqueue(llmtest.Text("a"), llmtest.Text("b"))
	if _, err := h.eng.RunTurn(ctxT(t), "small", h.prof, "hi"); err != nil {
		t.Fatal(err)
	}
	if got := offered(h.srv.Last()); !slices.Equal(got, []string{"fake__echo", "fake__other"}) {
		t.Fatalf("offered %v, want the whole catalog", got)
	}
	h.prof.ToolBudget = 1
	if _, err := h.eng.RunTurn(ctxT(t), "small", h.prof, "hi"); err != nil {
		t.Fatal(err)
	}
	if got := offered(h.srv.Last()); !slices.Equal(got, []string{loop.SearchToolsTool}) {
		t.Fatalf("offered %v with a budget of 1, want search_tools", got)
	}
}
