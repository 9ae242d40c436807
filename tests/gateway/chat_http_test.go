package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// TestChatREST drives the chat service through the gateway's REST routes
// only: profiles (the API key over HTTP, never shown again), a conversation
// followed over SSE with a real tool call, its history, an approval given
// from a second HTTP client, a server's request for input answered from
// it, a cancel and a delete.
func TestChatREST(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	base := c.url + "/api/v1/chat"

	// A profile PUT with its API key: no answer ever shows the key.
	p := c.putProfile(t, "helper", nil)
	if !p.HasAPIKey || p.Name != "helper" {
		t.Fatalf("profile %+v", p)
	}
	for _, path := range []string{"/profiles/helper", "/profiles"} {
		r := httpDo(t, "GET", base+path, c.admin, nil)
		if r.status != http.StatusOK || bytes.Contains(r.body, []byte(modelKey)) || !bytes.Contains(r.body, []byte(`"has_api_key":true`)) {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	// Requests the gateway refuses itself, in the error contract.
	for _, bad := range []struct {
		method, path, field string
		body                any
	}{
		{"PUT", "/profiles/helper", "name", rest.ProfilePutBody{Profile: model.Profile{Name: "other", Provider: "openai", Model: "m"}}},
		{"PUT", "/profiles/helper", "remove_api_key", rest.ProfilePutBody{Profile: model.Profile{Provider: "openai", Model: "m"}, APIKey: "k", RemoveAPIKey: true}},
		{"GET", "/conversations/Not.An.Id", "id", nil},
		{"POST", "/conversations", "profile", model.ChatSendRequest{Message: "no profile"}},
	} {
		r := httpDo(t, bad.method, base+bad.path, c.admin, bad.body)
		if e := r.contract(t); r.status != http.StatusBadRequest || e.Field != bad.field {
			t.Fatalf("%s %s: %d %s, want 400 on %s", bad.method, bad.path, r.status, r.body, bad.field)
		}
	}

	// Profiles are admin's: a chat key may not read or write them.
	if r := httpDo(t, "GET", base+"/profiles", c.chat, nil); r.status != http.StatusForbidden {
		t.Fatalf("profiles with a chat key: %d %s", r.status, r.body)
	}

	// A conversation whose id the client picks, so its events are followed
	// before the first message: a tool call through the runner, then the answer.
	conv := uuid.NewString()
	events := openSSE(t, base+"/conversations/"+conv+"/events", c.chat)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"over http"}`)), llmtest.Text("it said: over http"))
	r := httpDo(t, "POST", base+"/conversations", c.chat, model.ChatSendRequest{Conversation: conv, Profile: "helper", Message: "echo it"})
	var sent model.ChatSendReply
	r.decode(t, &sent)
	if r.status != http.StatusAccepted || sent.Conversation != conv || sent.Turn == "" || r.header.Get("Location") != "/api/v1/chat/conversations/"+conv {
		t.Fatalf("POST conversations: %d %s (Location %q)", r.status, r.body, r.header.Get("Location"))
	}
	evs := events.until(t, time.Minute, isDone)
	var text strings.Builder
	for _, ev := range evs {
		if ev.Kind == model.ChatEventTextDelta {
			text.WriteString(ev.Text)
		}
	}
	if got := toolStates(evs); !slices.Equal(got, []string{"tm__echo:started", "tm__echo:completed"}) {
		t.Fatalf("tool call states %q", got)
	}
	if d := evs[len(evs)-1].Done; d == nil || d.Reason != model.TurnFinal || text.String() != "it said: over http" {
		t.Fatalf("turn ended %+v with text %q", d, text.String())
	}
	// The model got the tool's real result.
	if req := c.llm.Last(); !bytes.Contains(req.Body, []byte("over http")) || !bytes.Contains(req.Body, []byte(`"role":"tool"`)) {
		t.Fatalf("the model's second request has no tool result: %s", req.Body)
	}

	// A client that comes later replays the turn's events from the stream.
	replayed := openSSE(t, base+"/conversations/"+conv+"/events?replay=true", c.chat).until(t, 30*time.Second, isDone)
	if len(replayed) != len(evs) || replayed[0].Turn != sent.Turn {
		t.Fatalf("replay gave %d events, live %d", len(replayed), len(evs))
	}

	// History and list.
	r = httpDo(t, "GET", base+"/conversations/"+conv, c.chat, nil)
	var hist model.ChatHistoryReply
	r.decode(t, &hist)
	var kinds []string
	for _, e := range hist.Entries {
		kinds = append(kinds, e.Kind)
	}
	for _, k := range []string{model.EntryUserMessage, model.EntryModelStep, model.EntryToolResult, model.EntryTurnEnd} {
		if !slices.Contains(kinds, k) {
			t.Fatalf("history %d has no %s entry: %q", r.status, k, kinds)
		}
	}
	r = httpDo(t, "GET", base+"/conversations", c.chat, nil)
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(conv)) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	// Approval: a profile that asks before every call; the call waits until
	// a second client of the same key approves it (another key would not
	// find the conversation: TestChatPrincipals).
	c.putProfile(t, "careful", func(b *rest.ProfilePutBody) { b.Approval = model.ApprovalPolicy{Default: model.ApprovalAsk} })
	other := c.chat
	asked := uuid.NewString()
	aevents := openSSE(t, base+"/conversations/"+asked+"/events", c.chat)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"approved"}`)), llmtest.Text("done after approval"))
	if r := httpDo(t, "POST", base+"/conversations", c.chat, model.ChatSendRequest{Conversation: asked, Profile: "careful", Message: "go"}); r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	aevents.until(t, time.Minute, func(ev model.ChatEvent) bool {
		return ev.ToolCall != nil && ev.ToolCall.State == model.ToolCallAwaitingApproval
	})
	// The pending record may land just after the event: ask until it shows.
	var pending model.ChatPendingReply
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r := httpDo(t, "GET", base+"/conversations/"+asked+"/pending", other, nil)
		r.decode(t, &pending)
		return r.status == http.StatusOK && len(pending.Calls) == 1 && pending.Calls[0].Tool == "tm__echo", "pending: " + string(r.body)
	})
	r = httpDo(t, "POST", fmt.Sprintf("%s/conversations/%s/approvals/%s", base, asked, pending.Calls[0].CallID), other,
		rest.ChatDecisionRequest{Decision: model.DecisionApprove})
	if r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	evs = aevents.until(t, time.Minute, isDone)
	if got := toolStates(evs); !slices.Contains(got, "tm__echo:completed") || evs[len(evs)-1].Done.Reason != model.TurnFinal {
		t.Fatalf("after the approval: %q, %+v", got, evs[len(evs)-1].Done)
	}
	if r := httpDo(t, "POST", base+"/conversations/"+asked+"/approvals/nope", other, rest.ChatDecisionRequest{Decision: "maybe"}); r.status != http.StatusBadRequest {
		t.Fatalf("a bad decision: %d %s", r.status, r.body)
	}

	// A server's request for input (the test server's ask tool): listed as
	// pending, an answer that misfits the form refused naming the property,
	// then answered from the second client; a second answer conflicts.
	inputConv := uuid.NewString()
	ievents := openSSE(t, base+"/conversations/"+inputConv+"/events", c.chat)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__ask", `{"message":"Who are you?"}`)), llmtest.Text("greeted"))
	if r := httpDo(t, "POST", base+"/conversations", c.chat, model.ChatSendRequest{Conversation: inputConv, Profile: "helper", Message: "greet me"}); r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	ievs := ievents.until(t, time.Minute, func(ev model.ChatEvent) bool { return ev.Kind == model.ChatEventInputRequested })
	in := ievs[len(ievs)-1].Input
	if in == nil || in.Tool != "tm__ask" || in.Message != "Who are you?" {
		t.Fatalf("input_requested %+v", ievs[len(ievs)-1])
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r := httpDo(t, "GET", base+"/conversations/"+inputConv+"/pending", other, nil)
		r.decode(t, &pending)
		return r.status == http.StatusOK && len(pending.Inputs) == 1 && pending.Inputs[0].InputID == in.InputID, "pending: " + string(r.body)
	})
	answerURL := fmt.Sprintf("%s/conversations/%s/inputs/%s", base, inputConv, in.InputID)
	r = httpDo(t, "POST", answerURL, other, rest.ChatAnswerBody{Action: model.InputAccept, Content: map[string]any{"name": "Ada", "age": 400}})
	if e := r.contract(t); r.status != http.StatusBadRequest || e.Field != "age" {
		t.Fatalf("an age out of bounds: %d %s, want 400 on age", r.status, r.body)
	}
	r = httpDo(t, "POST", answerURL, other, rest.ChatAnswerBody{Action: model.InputAccept, Content: map[string]any{"name": "Ada", "colour": "red"}})
	if r.status != http.StatusOK {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	if evs := ievents.until(t, time.Minute, isDone); evs[len(evs)-1].Done.Reason != model.TurnFinal {
		t.Fatalf("after the answer: %+v", evs[len(evs)-1].Done)
	}
	if req := c.llm.Last(); !bytes.Contains(req.Body, []byte("hello Ada, colour red")) {
		t.Fatalf("the answer did not reach the server: %s", req.Body)
	}
	if r := httpDo(t, "POST", answerURL, other, rest.ChatAnswerBody{Action: model.InputCancel}); r.status != http.StatusConflict {
		t.Fatalf("a second answer: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "POST", base+"/conversations/"+inputConv+"/inputs/nope", other, rest.ChatAnswerBody{Action: model.InputDecline}); r.status != http.StatusNotFound {
		t.Fatalf("an unknown input: %d %s", r.status, r.body)
	}

	// Cancel a turn waiting on a slow model, continuing the first
	// conversation with a new message.
	c.llm.Enqueue(llmtest.Slow(llmtest.Text("a very slow answer"), time.Minute))
	asks := c.llm.Attempts()
	if r := httpDo(t, "POST", base+"/conversations/"+conv+"/messages", c.chat, rest.ChatMessageRequest{Message: "again"}); r.status != http.StatusAccepted {
		t.Fatalf("messages: %d %s", r.status, r.body)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { return c.llm.Attempts() > asks, "the model was not asked" })
	r = httpDo(t, "POST", base+"/conversations/"+conv+"/cancel", c.chat, nil)
	var cancelled model.ChatCancelReply
	r.decode(t, &cancelled)
	if r.status != http.StatusOK || cancelled.Done == nil || cancelled.Done.Reason != model.TurnCancelled {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if d := events.until(t, time.Minute, isDone); d[len(d)-1].Done.Reason != model.TurnCancelled {
		t.Fatalf("the stream saw the turn end %+v", d[len(d)-1].Done)
	}

	// Delete: gone from the history and the list.
	if r := httpDo(t, "DELETE", base+"/conversations/"+conv, c.chat, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "GET", base+"/conversations/"+conv, c.chat, nil); r.status != http.StatusNotFound {
		t.Fatalf("history after delete: %d %s", r.status, r.body)
	}

	// The key is removed on request, and a profile is deleted.
	p = c.putProfile(t, "helper", func(b *rest.ProfilePutBody) { b.APIKey, b.RemoveAPIKey = "", true })
	if p.HasAPIKey {
		t.Fatalf("remove_api_key kept the key: %+v", p)
	}
	if r := httpDo(t, "DELETE", base+"/profiles/careful", c.admin, nil); r.status != http.StatusOK {
		t.Fatalf("delete profile: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "GET", base+"/profiles/careful", c.admin, nil); r.status != http.StatusNotFound {
		t.Fatalf("deleted profile: %d %s", r.status, r.body)
	}
}
