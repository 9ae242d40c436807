package loop_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/approvals"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// inputEvents records the input events of a turn and hands each request on.
type inputEvents struct {
	mu       sync.Mutex
	answered []model.ChatInput
	asked    chan model.ChatInput
}

func (e *inputEvents) publish(ev model.ChatEvent) {
	switch ev.Kind {
	case model.ChatEventInputRequested:
		e.asked <- *ev.Input
	case model.ChatEventInputAnswered:
		e.mu.Lock()
		e.answered = append(e.answered, *ev.Input)
		e.mu.Unlock()
	}
}

func (e *inputEvents) last(t *testing.T) model.ChatInput {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.answered) == 0 {
		t.Fatal("no input_answered event")
	}
	return e.answered[len(e.answered)-1]
}

// A server's request for input during a turn's tool call (the test
// server's ask tool, a form elicitation) is put to the user: an
// input_requested event, a pending input in the KV bucket, the answer
// checked against the form (a bad one changes nothing), the server
// hearing the accepted content, decline or cancel; a timeout cancels it;
// a turn without a user channel declines it.
func TestElicitationDuringATurn(t *testing.T) {
	e, l := realTools(t)
	srv := llmtest.Start(t, "sk-test")
	ap, err := approvals.Open(ctxT(t), e.NC, approvals.Options{InputTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ev := &inputEvents{asked: make(chan model.ChatInput, 4)}
	eng := loop.New(loop.Deps{Log: l, Tools: loop.ClientTools{C: e.Client}, Model: newModel, Publish: ev.publish,
		Inputs: ap, CallTimeout: 25 * time.Second})
	prof := model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: srv.OpenAIBaseURL(),
		ToolFilter: model.ChatToolFilter{Include: []string{"tm__ask"}}}

	// turn runs a turn whose model calls tm__ask, answers its input with
	// answer, and returns what the model heard from the tool.
	turn := func(t *testing.T, conv string, eng *loop.Engine, noInput bool, answer func(model.ChatInput)) string {
		t.Helper()
		srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "a_" + conv, Name: "tm__ask", Arguments: `{"message":"Who are you?"}`}),
			llmtest.Text("noted"))
		type result struct {
			done model.ChatDone
			err  error
		}
		res := make(chan result, 1)
		go func() {
			tn, err := eng.Begin(ctxT(t), conv, prof, "ask me", loop.BeginOptions{NoInput: noInput})
			if err != nil {
				res <- result{err: err}
				return
			}
			d, err := tn.Drive(ctxT(t))
			res <- result{d, err}
		}()
		if answer != nil {
			select {
			case in := <-ev.asked:
				if in.Server != "tm" || in.Tool != "tm__ask" || in.CallID != "a_"+conv || in.Message != "Who are you?" ||
					!strings.Contains(string(in.RequestedSchema), `"colour"`) || in.ExpiresAt.IsZero() {
					t.Fatalf("input_requested %+v", in)
				}
				answer(in)
			case r := <-res:
				t.Fatalf("the turn ended without asking: %+v %v", r.done, r.err)
			case <-time.After(30 * time.Second):
				t.Fatal("no input_requested event")
			}
		}
		r := <-res
		if r.err != nil || r.done.Reason != model.TurnFinal {
			t.Fatalf("%+v %v", r.done, r.err)
		}
		return string(srv.Last().Body)
	}
	ctx := ctxT(t)

	t.Run("accept after bad content", func(t *testing.T) {
		var in model.ChatInput
		body := turn(t, "accept", eng, false, func(got model.ChatInput) {
			in = got
			p, err := ap.PendingInputs(ctx, "accept")
			if err != nil || len(p) != 1 || p[0].InputID != in.InputID {
				t.Fatalf("pending inputs %+v %v", p, err)
			}
			for _, bad := range []struct {
				content map[string]any
				field   string
			}{
				{map[string]any{"age": 36.0}, "name"},
				{map[string]any{"name": "Ada", "age": 200.0}, "age"},
				{map[string]any{"name": "Ada", "age": "old"}, "age"},
				{map[string]any{"name": "Ada", "colour": "pink"}, "colour"},
				{map[string]any{"name": "Ada", "shoe": 42.0}, "shoe"},
			} {
				err := ap.Answer(ctx, model.ChatAnswerRequest{Conversation: "accept", InputID: in.InputID, Action: model.InputAccept, Content: bad.content})
				if e := apierr.From(err); err == nil || e.Code != apierr.Validation || e.Field != bad.field {
					t.Errorf("content %v: %v, want a VALIDATION_ERROR on %s", bad.content, err, bad.field)
				}
			}
			if p, _ := ap.PendingInputs(ctx, "accept"); len(p) != 1 {
				t.Fatalf("a bad answer changed the pending input: %+v", p)
			}
			err = ap.Answer(ctx, model.ChatAnswerRequest{Conversation: "accept", InputID: "no-such-input", Action: model.InputDecline})
			if apierr.Of(err) != apierr.NotFound {
				t.Errorf("an unknown input id: %v", err)
			}
			if err := ap.Answer(ctx, model.ChatAnswerRequest{Conversation: "accept", InputID: in.InputID, Action: model.InputAccept,
				Content: map[string]any{"name": "Ada", "age": 36.0, "colour": "green"}}); err != nil {
				t.Fatal(err)
			}
		})
		if !strings.Contains(body, "hello Ada, age 36, colour green") {
			t.Fatalf("the accepted content did not reach the server's result: %s", body)
		}
		if got := ev.last(t); got.InputID != in.InputID || got.Action != model.InputAccept {
			t.Fatalf("input_answered %+v", got)
		}
		err := ap.Answer(ctx, model.ChatAnswerRequest{Conversation: "accept", InputID: in.InputID, Action: model.InputDecline})
		if apierr.Of(err) != apierr.Conflict {
			t.Fatalf("a second answer: %v, want CONFLICT", err)
		}
		if p, err := ap.PendingInputs(ctx, "accept"); err != nil || len(p) != 0 {
			t.Fatalf("still pending after the turn: %+v %v", p, err)
		}
	})

	for _, action := range []string{model.InputDecline, model.InputCancel} {
		t.Run(action, func(t *testing.T) {
			body := turn(t, action, eng, false, func(in model.ChatInput) {
				if err := ap.Answer(ctx, model.ChatAnswerRequest{Conversation: action, InputID: in.InputID, Action: action}); err != nil {
					t.Fatal(err)
				}
			})
			if !strings.Contains(body, "the user chose "+action) {
				t.Fatalf("the server did not hear %s: %s", action, body)
			}
		})
	}

	t.Run("timeout cancels", func(t *testing.T) {
		short, err := approvals.Open(ctx, e.NC, approvals.Options{InputTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		eng := loop.New(loop.Deps{Log: l, Tools: loop.ClientTools{C: e.Client}, Model: newModel, Publish: ev.publish,
			Inputs: short, CallTimeout: 25 * time.Second})
		body := turn(t, "timeout", eng, false, func(model.ChatInput) {})
		if !strings.Contains(body, "the user chose cancel") {
			t.Fatalf("the server did not hear cancel: %s", body)
		}
		if got := ev.last(t); got.Action != model.InputCancel || !strings.Contains(got.Reason, "nobody answered") {
			t.Fatalf("input_answered of the timeout: %+v", got)
		}
	})

	// The user's time on the form does not count against the call's
	// timeout, neither the chat's nor the runner's (given the chat's as
	// Mcp-Timeout-Ms): an answer after 2.5 s completes a call of 1 s.
	t.Run("answer after the call timeout", func(t *testing.T) {
		eng := loop.New(loop.Deps{Log: l, Tools: loop.ClientTools{C: e.Client}, Model: newModel, Publish: ev.publish,
			Inputs: ap, CallTimeout: time.Second})
		body := turn(t, "slow", eng, false, func(in model.ChatInput) {
			time.Sleep(2500 * time.Millisecond)
			if err := ap.Answer(ctx, model.ChatAnswerRequest{Conversation: "slow", InputID: in.InputID, Action: model.InputAccept,
				Content: map[string]any{"name": "Ada"}}); err != nil {
				t.Fatal(err)
			}
		})
		if !strings.Contains(body, "hello Ada") {
			t.Fatalf("a late answer did not reach the server's result: %s", body)
		}
	})

	t.Run("no user channel declines", func(t *testing.T) {
		body := turn(t, "oai-none", eng, true, nil)
		if !strings.Contains(body, "the user chose decline") {
			t.Fatalf("the server did not hear decline: %s", body)
		}
		if got := ev.last(t); got.Action != model.InputDecline || !strings.Contains(got.Reason, "no user to ask") {
			t.Fatalf("input_answered of the declined input: %+v", got)
		}
		select {
		case in := <-ev.asked:
			t.Fatalf("asked the user of a conversation without one: %+v", in)
		default:
		}
	})
}
