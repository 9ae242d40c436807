package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	gwopenai "github.com/mcpbus/mcpbus/services/gateway/openai"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// TestChatPrincipals is issue 28's "Why" 1 as two users with two chat keys:
// everything B tries on A's conversation — list, read, post, cancel, answer
// A's pending approval, answer an input, delete — is NOT_FOUND, over REST
// and the bus, and following it (with replay) gets a stream that carries
// nothing, as an id nobody holds does (and A's /v1/chat/completions
// conversation is A's too); A's conversation is untouched and
// A's own approval runs the call; an admin key lists both and may delete
// B's, and the audit events say who did it.
func TestChatPrincipals(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	base := c.url + "/api/v1/chat"
	c.putProfile(t, "careful", func(b *rest.ProfilePutBody) { b.Approval = model.ApprovalPolicy{Default: model.ApprovalAsk} })
	c.putProfile(t, "helper", nil)
	keyA := c.createKey(t, model.KeyCreateRequest{Name: "user a", Scopes: []string{model.KeyScopeChat}})
	keyB := c.createKey(t, model.KeyCreateRequest{Name: "user b", Scopes: []string{model.KeyScopeChat}})
	idA, idB := "key:"+keyA.ID, "key:"+keyB.ID

	// A's conversation waits on an approval of a call with A's password in it.
	convA := uuid.NewString()
	evA := openSSE(t, base+"/conversations/"+convA+"/events", keyA.Key)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"hunter2"}`)), llmtest.Text("done for A"))
	if r := httpDo(t, "POST", base+"/conversations", keyA.Key, model.ChatSendRequest{Conversation: convA, Profile: "careful", Message: "my password is hunter2"}); r.status != http.StatusAccepted {
		t.Fatalf("A's POST: %d %s", r.status, r.body)
	}
	evA.until(t, time.Minute, func(ev model.ChatEvent) bool {
		return ev.ToolCall != nil && ev.ToolCall.State == model.ToolCallAwaitingApproval
	})
	var pending model.ChatPendingReply
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r := httpDo(t, "GET", base+"/conversations/"+convA+"/pending", keyA.Key, nil)
		r.decode(t, &pending)
		return r.status == http.StatusOK && len(pending.Calls) == 1, "pending: " + string(r.body)
	})
	callID := pending.Calls[0].CallID

	// B over REST: every route of A's conversation is NOT_FOUND, worded as
	// for a conversation that does not exist.
	notFound := func(what string, r reply) {
		t.Helper()
		e := r.contract(t)
		if r.status != http.StatusNotFound || e.Code != apierr.NotFound || bytes.Contains(r.body, []byte("hunter2")) {
			t.Fatalf("B %s: %d %s, want 404 NOT_FOUND", what, r.status, r.body)
		}
	}
	conv := base + "/conversations/" + convA
	notFound("history", httpDo(t, "GET", conv, keyB.Key, nil))
	notFound("pending", httpDo(t, "GET", conv+"/pending", keyB.Key, nil))
	// B following A's conversation gets what following an id nobody holds
	// gets (the route does not tell whether an id is taken): a stream that
	// carries nothing, checked once A's turn has run below.
	bStreams := map[string]*sseStream{
		"events":             openSSE(t, conv+"/events", keyB.Key),
		"events?replay=true": openSSE(t, conv+"/events?replay=true", keyB.Key),
		"events?since=0":     openSSE(t, conv+"/events?since=0", keyB.Key), // A's stored events, each dropped
		"an id nobody holds": openSSE(t, base+"/conversations/"+uuid.NewString()+"/events", keyB.Key),
	}
	notFound("post", httpDo(t, "POST", conv+"/messages", keyB.Key, rest.ChatMessageRequest{Message: "injected by B"}))
	notFound("post as new", httpDo(t, "POST", base+"/conversations", keyB.Key, model.ChatSendRequest{Conversation: convA, Profile: "helper", Message: "injected by B"}))
	notFound("cancel", httpDo(t, "POST", conv+"/cancel", keyB.Key, rest.ChatCancelBody{}))
	notFound("approve", httpDo(t, "POST", conv+"/approvals/"+callID, keyB.Key, rest.ChatDecisionRequest{Decision: model.DecisionApproveConversation}))
	notFound("answer", httpDo(t, "POST", conv+"/inputs/in_1", keyB.Key, rest.ChatAnswerBody{Action: model.InputDecline}))
	notFound("delete", httpDo(t, "DELETE", conv, keyB.Key, nil))
	if r := httpDo(t, "GET", base+"/conversations", keyB.Key, nil); r.status != http.StatusOK || bytes.Contains(r.body, []byte(convA)) {
		t.Fatalf("B's list: %d %s", r.status, r.body)
	}
	// Worded exactly as for an id nobody holds (a read does not take it).
	never := uuid.NewString()
	for _, v := range []struct{ method, path string }{{"GET", ""}, {"GET", "/pending"}, {"DELETE", ""}} {
		sameAsUnknown(t, "B's "+v.method+" "+v.path, httpDo(t, v.method, conv+v.path, keyB.Key, nil),
			httpDo(t, v.method, base+"/conversations/"+never+v.path, keyB.Key, nil), convA, never)
	}

	// B on the bus, as the gateway would send for B's key (the operator's
	// client with B's principal in the context): NOT_FOUND too.
	busB := principal.With(ctxT(t, time.Minute), principal.Key(keyB.ID, false, model.ToolFilter{}))
	cl := c.st.Client
	for what, err := range map[string]error{
		"history": func() error { _, err := cl.ChatHistory(busB, convA); return err }(),
		"pending": func() error { _, err := cl.ChatPending(busB, convA); return err }(),
		"watch":   func() error { _, err := cl.ChatWatch(busB, convA); return err }(),
		"send": func() error {
			_, err := cl.ChatSend(busB, model.ChatSendRequest{Conversation: convA, Message: "injected by B"})
			return err
		}(),
		"cancel": func() error { _, err := cl.ChatCancel(busB, model.ChatCancelRequest{Conversation: convA}); return err }(),
		"approve": func() error {
			_, err := cl.ChatApprove(busB, model.ChatApproveRequest{Conversation: convA, CallID: callID, Decision: model.DecisionApproveConversation})
			return err
		}(),
		"answer": func() error {
			_, err := cl.ChatAnswer(busB, model.ChatAnswerRequest{Conversation: convA, InputID: "in_1", Action: model.InputDecline})
			return err
		}(),
		"delete": cl.ChatDelete(busB, convA),
	} {
		if apierr.Of(err) != apierr.NotFound {
			t.Fatalf("B on the bus, %s: %v, want NOT_FOUND", what, err)
		}
	}
	if list, err := cl.ChatList(busB); err != nil || slices.ContainsFunc(list, func(cv model.ChatConversation) bool { return cv.Conversation == convA }) {
		t.Fatalf("B's list on the bus: %v %+v", err, list)
	}

	// A's call still waits for A: nothing of B's ran or was written.
	r := httpDo(t, "GET", conv, keyA.Key, nil)
	if r.status != http.StatusOK || bytes.Contains(r.body, []byte("injected by B")) {
		t.Fatalf("A's history: %d %s", r.status, r.body)
	}
	if r := httpDo(t, "POST", conv+"/approvals/"+callID, keyA.Key, rest.ChatDecisionRequest{Decision: model.DecisionApprove}); r.status != http.StatusOK {
		t.Fatalf("A's approval: %d %s", r.status, r.body)
	}
	evs := evA.until(t, time.Minute, isDone)
	if got := toolStates(evs); !slices.Contains(got, "tm__echo:completed") || evs[len(evs)-1].Done.Reason != model.TurnFinal {
		t.Fatalf("A's turn after A's approval: %q %+v", got, evs[len(evs)-1].Done)
	}
	time.Sleep(time.Second) // what A's turn published has reached B's streams
	for what, s := range bStreams {
		select {
		case f, ok := <-s.frames:
			t.Fatalf("B's stream (%s): an event %q %s, or it ended (%v)", what, f.event, f.data, !ok)
		default:
		}
	}

	// A's completion on /v1 is A's conversation too: B cannot read or delete it.
	c.llm.Enqueue(llmtest.Text("completed for A"))
	var resp *http.Response
	clientA := oaiClient(c, keyA.Key)
	if _, err := clientA.Chat.Completions.New(ctxT(t, time.Minute), openai.ChatCompletionNewParams{Model: "helper",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("A's question")}}, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	oaiConv := base + "/conversations/" + resp.Header.Get(gwopenai.ConversationHeader)
	notFound("reading A's completion", httpDo(t, "GET", oaiConv, keyB.Key, nil))
	notFound("deleting A's completion", httpDo(t, "DELETE", oaiConv, keyB.Key, nil))
	if r := httpDo(t, "GET", oaiConv, keyA.Key, nil); r.status != http.StatusOK || !bytes.Contains(r.body, []byte("A's question")) {
		t.Fatalf("A reading A's completion: %d %s", r.status, r.body)
	}

	// B's own conversation; A does not see it.
	convB := "b-notes"
	c.llm.Enqueue(llmtest.Text("noted"))
	if r := httpDo(t, "POST", base+"/conversations", keyB.Key, model.ChatSendRequest{Conversation: convB, Profile: "helper", Message: "B's note"}); r.status != http.StatusAccepted {
		t.Fatalf("B's POST: %d %s", r.status, r.body)
	}
	notFound("(A) reading B's", httpDo(t, "GET", base+"/conversations/"+convB, keyA.Key, nil))
	if r := httpDo(t, "GET", base+"/conversations", keyA.Key, nil); !bytes.Contains(r.body, []byte(convA)) || bytes.Contains(r.body, []byte(convB)) {
		t.Fatalf("A's list: %d %s", r.status, r.body)
	}

	// An admin key lists both, with their owners, and deletes B's.
	var list model.ChatListReply
	httpDo(t, "GET", base+"/conversations", c.admin, nil).decode(t, &list)
	owners := map[string]string{}
	for _, cv := range list.Conversations {
		owners[cv.Conversation] = cv.Owner
	}
	if owners[convA] != idA || owners[convB] != idB {
		t.Fatalf("admin's list: %+v", list.Conversations)
	}
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) { // B's turn may still run
		r := httpDo(t, "DELETE", base+"/conversations/"+convB, c.admin, nil)
		return r.status == http.StatusOK, fmt.Sprintf("admin's delete: %d %s", r.status, r.body)
	})
	if r := httpDo(t, "GET", base+"/conversations/"+convB, keyB.Key, nil); r.status != http.StatusNotFound {
		t.Fatalf("B's conversation after the admin's delete: %d %s", r.status, r.body)
	}

	// The audit: A's send, A's approval, and the admin's delete of B's.
	var me rest.MeReply
	httpDo(t, "GET", c.url+"/api/v1/me", c.admin, nil).decode(t, &me)
	audits := func(conv string) []model.ChatAuditEvent {
		var out []model.ChatAuditEvent
		for _, d := range replayEvents(t, c, bus.NewSubjects("").Event("chat", conv)+".audit") {
			var ev model.ChatAuditEvent
			if err := json.Unmarshal(d, &ev); err != nil {
				t.Fatal(err)
			}
			out = append(out, ev)
		}
		return out
	}
	want := func(evs []model.ChatAuditEvent, action, who, owner string, asAdmin bool) {
		t.Helper()
		if !slices.ContainsFunc(evs, func(ev model.ChatAuditEvent) bool {
			return ev.Action == action && ev.Principal == who && ev.Owner == owner && ev.AsAdmin == asAdmin
		}) {
			t.Fatalf("no audit event %s by %s (owner %s, as_admin %v) in %+v", action, who, owner, asAdmin, evs)
		}
	}
	aEvents := audits(convA)
	want(aEvents, model.ChatAuditSend, idA, idA, false)
	want(aEvents, model.ChatAuditApprove, idA, idA, false)
	for _, ev := range aEvents {
		if ev.Principal != idA {
			t.Fatalf("an audit event of A's conversation by someone else: %+v", ev)
		}
	}
	want(audits(convB), model.ChatAuditDelete, "key:"+me.KeyID, idB, true)

	// The tool call A approved reached the runner in A's name.
	calls := replayEvents(t, c, bus.NewSubjects("").Event("call", "tm"))
	if !slices.ContainsFunc(calls, func(d json.RawMessage) bool {
		var ev model.CallEvent
		return json.Unmarshal(d, &ev) == nil && strings.HasSuffix(ev.Tool, "echo") && ev.Principal == idA
	}) {
		t.Fatalf("no call event of tm__echo for %s: %s", idA, calls)
	}
}

// TestChatProfileOwned: a profile with an owner is invisible to any other
// chat key (its models list, a completion naming it, a send), usable by
// its owner.
func TestChatProfileOwned(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	keyA := c.createKey(t, model.KeyCreateRequest{Name: "user a", Scopes: []string{model.KeyScopeChat}})
	keyB := c.createKey(t, model.KeyCreateRequest{Name: "user b", Scopes: []string{model.KeyScopeChat}})
	c.putProfile(t, "mine", func(b *rest.ProfilePutBody) { b.Owner = "key:" + keyA.ID })
	ctx := ctxT(t, 2*time.Minute)

	clientB, clientA := oaiClient(c, keyB.Key), oaiClient(c, keyA.Key)
	if models, err := clientB.Models.List(ctx); err != nil || len(models.Data) != 0 {
		t.Fatalf("B's models: %+v %v", models, err)
	}
	if models, err := clientA.Models.List(ctx); err != nil || len(models.Data) != 1 {
		t.Fatalf("A's models: %+v %v", models, err)
	}
	_, err := clientB.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "mine",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if !oaiError(err, http.StatusNotFound, "invalid_request_error", "model_not_found") {
		t.Fatalf("B's completion on A's profile: %v", err)
	}
	r := httpDo(t, "POST", c.url+"/api/v1/chat/conversations", keyB.Key, model.ChatSendRequest{Profile: "mine", Message: "hi"})
	if e := r.contract(t); r.status != http.StatusNotFound || !strings.Contains(e.Message, "profile mine") {
		t.Fatalf("B's send on A's profile: %d %s", r.status, r.body)
	}
	// Each answer B gets for A's profile is, but the name, that of a
	// profile nobody has: /v1/models/{model} (models.retrieve) and a send.
	sameAsUnknown(t, "B's GET /v1/models/mine", httpDo(t, "GET", c.url+"/v1/models/mine", keyB.Key, nil),
		httpDo(t, "GET", c.url+"/v1/models/nosuchprofile", keyB.Key, nil), "mine", "nosuchprofile")
	sameAsUnknown(t, "B's send on A's profile", r,
		httpDo(t, "POST", c.url+"/api/v1/chat/conversations", keyB.Key, model.ChatSendRequest{Profile: "nosuchprofile", Message: "hi"}), "mine", "nosuchprofile")
	if r := httpDo(t, "GET", c.url+"/v1/models/mine", keyA.Key, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"id":"mine"`) {
		t.Fatalf("A's GET /v1/models/mine: %d %s", r.status, r.body)
	}

	c.llm.Enqueue(llmtest.Text("hello A"))
	out, err := clientA.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "mine",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if err != nil || out.Choices[0].Message.Content != "hello A" {
		t.Fatalf("A's completion on A's profile: %+v %v", out, err)
	}
}

// TestChatToolFilterIntersection is issue 28's "Why" 2: a chat key whose
// tool filter allows nothing cannot run tm__echo through either chat front
// door: the model is offered no tool, and its call is refused unrun.
func TestChatToolFilterIntersection(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	c.putProfile(t, "helper", nil) // the profile allows every tool
	none := c.createKey(t, model.KeyCreateRequest{Name: "no tools", Scopes: []string{model.KeyScopeChat},
		Tools: model.ToolFilter{Deny: []string{"*"}}})
	before := len(replayEvents(t, c, bus.NewSubjects("").Event("call", "tm")))

	// REST: the turn's call is refused as an unknown tool.
	conv := uuid.NewString()
	evs := openSSE(t, c.url+"/api/v1/chat/conversations/"+conv+"/events", none.Key)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"should not run"}`)), llmtest.Text("refused"))
	if r := httpDo(t, "POST", c.url+"/api/v1/chat/conversations", none.Key, model.ChatSendRequest{Conversation: conv, Profile: "helper", Message: "echo"}); r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	got := evs.until(t, time.Minute, isDone)
	if states := toolStates(got); !slices.Equal(states, []string{"tm__echo:failed"}) {
		t.Fatalf("tool states %q, want the call refused", states)
	}
	reqs := c.llm.Requests()
	if len(reqs) < 2 || bytes.Contains(reqs[len(reqs)-2].Body, []byte(`"tm__echo"`)) || !bytes.Contains(reqs[len(reqs)-1].Body, []byte("Unknown tool")) {
		t.Fatalf("the model was offered tm__echo or not told it is unknown: %d requests", len(reqs))
	}

	// /v1/chat/completions: the same.
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"should not run"}`)), llmtest.Text("refused again"))
	clientN := oaiClient(c, none.Key)
	out, err := clientN.Chat.Completions.New(ctxT(t, 2*time.Minute), openai.ChatCompletionNewParams{Model: "helper",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("echo")}})
	if err != nil || out.Choices[0].Message.Content != "refused again" {
		t.Fatalf("completion: %+v %v", out, err)
	}
	reqs = c.llm.Requests()
	if bytes.Contains(reqs[len(reqs)-2].Body, []byte(`"tm__echo"`)) || !bytes.Contains(reqs[len(reqs)-1].Body, []byte("Unknown tool")) {
		t.Fatalf("the completion's model was offered tm__echo or not told it is unknown")
	}

	// Neither call reached the runner; the admin key (no filter) still may.
	if after := len(replayEvents(t, c, bus.NewSubjects("").Event("call", "tm"))); after != before {
		t.Fatalf("%d call events of tm since the key's turns, want none", after-before)
	}
	conv2 := uuid.NewString()
	evs2 := openSSE(t, c.url+"/api/v1/chat/conversations/"+conv2+"/events", c.chat)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"runs"}`)), llmtest.Text("ran"))
	if r := httpDo(t, "POST", c.url+"/api/v1/chat/conversations", c.chat, model.ChatSendRequest{Conversation: conv2, Profile: "helper", Message: "echo"}); r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	if states := toolStates(evs2.until(t, time.Minute, isDone)); !slices.Equal(states, []string{"tm__echo:started", "tm__echo:completed"}) {
		t.Fatalf("an unfiltered key's call: %q", states)
	}
}

// replayEvents are the stored events on subject, read until none comes for
// a second.
func replayEvents(t *testing.T, c *chatEnv, subject string) []json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch := make(chan json.RawMessage, 1024)
	go func() {
		_ = c.st.Client.FollowEvents(ctx, subject, true, func(ev client.Event) { ch <- ev.Data })
	}()
	var out []json.RawMessage
	for {
		select {
		case d := <-ch:
			out = append(out, d)
		case <-time.After(time.Second):
			return out
		case <-ctx.Done():
			return out
		}
	}
}

// TestDeletedConversationEventsStayBehind: once A deletes a conversation,
// B may take its id, but B's event stream starts at B's claim: neither
// ?replay=true nor ?since=0 replays A's events (they stay in MCP_EVENTS until
// they age out).
func TestDeletedConversationEventsStayBehind(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	base := c.url + "/api/v1/chat"
	c.putProfile(t, "helper", nil)
	keyA := c.createKey(t, model.KeyCreateRequest{Name: "user a", Scopes: []string{model.KeyScopeChat}})
	keyB := c.createKey(t, model.KeyCreateRequest{Name: "user b", Scopes: []string{model.KeyScopeChat}})

	conv := uuid.NewString()
	evA := openSSE(t, base+"/conversations/"+conv+"/events", keyA.Key)
	c.llm.Enqueue(llmtest.Text("A's secret is hunter2"))
	if r := httpDo(t, "POST", base+"/conversations", keyA.Key, model.ChatSendRequest{Conversation: conv, Profile: "helper", Message: "remember hunter2"}); r.status != http.StatusAccepted {
		t.Fatalf("A's POST: %d %s", r.status, r.body)
	}
	evA.until(t, time.Minute, isDone)
	if r := httpDo(t, "DELETE", base+"/conversations/"+conv, keyA.Key, nil); r.status != http.StatusOK {
		t.Fatalf("A's delete: %d %s", r.status, r.body)
	}

	// B takes the id with a replaying stream, then runs a turn of its own.
	replay := openSSE(t, base+"/conversations/"+conv+"/events?replay=true", keyB.Key)
	c.llm.Enqueue(llmtest.Text("B's answer"))
	if r := httpDo(t, "POST", base+"/conversations", keyB.Key, model.ChatSendRequest{Conversation: conv, Profile: "helper", Message: "hello"}); r.status != http.StatusAccepted {
		t.Fatalf("B's POST: %d %s", r.status, r.body)
	}
	since := openSSE(t, base+"/conversations/"+conv+"/events?since=0", keyB.Key)
	for name, s := range map[string]*sseStream{"replay=true": replay, "since=0": since} {
		evs := s.until(t, time.Minute, isDone)
		var text strings.Builder
		for _, ev := range evs {
			data, _ := json.Marshal(ev)
			text.Write(data)
		}
		if strings.Contains(text.String(), "hunter2") || !strings.Contains(text.String(), "B's answer") {
			t.Fatalf("B's stream (%s) of the reused id: %s", name, text.String())
		}
	}
	// A's stream, open across its delete, ended with the delete: none of
	// B's events reached it.
	var rest []string
	for deadline := time.After(20 * time.Second); ; {
		select {
		case f, ok := <-evA.frames:
			if ok {
				rest = append(rest, f.event+" "+f.data)
				continue
			}
		case <-deadline:
			t.Fatalf("A's stream is still open after A deleted the conversation; it got %v", rest)
		}
		break
	}
	if len(rest) == 0 || !strings.HasPrefix(rest[len(rest)-1], model.ChatEventDeleted+" ") || strings.Contains(strings.Join(rest, "\n"), "B's answer") {
		t.Fatalf("A's stream after its delete: %v", rest)
	}
}
