package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// chatFollower collects the events of one conversation as a client sees them.
type chatFollower struct {
	mu  sync.Mutex
	evs []model.ChatEvent
}

// followChat subscribes to a conversation's events (before its first send,
// so none is missed) until the end of the test.
func followChat(t *testing.T, cl *client.Client, conv string) *chatFollower {
	t.Helper()
	f := &chatFollower{}
	stop, err := cl.FollowChat(conv, func(ev model.ChatEvent) {
		f.mu.Lock()
		f.evs = append(f.evs, ev)
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("following conversation %s: %v", conv, err)
	}
	t.Cleanup(stop)
	return f
}

// wait returns the first event that satisfies match, waiting up to 20 s.
func (f *chatFollower) wait(t *testing.T, what string, match func(model.ChatEvent) bool) model.ChatEvent {
	t.Helper()
	var found model.ChatEvent
	waitFor(t, what, 20*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, ev := range f.evs {
			if match(ev) {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

// done waits for the done event of turn.
func (f *chatFollower) done(t *testing.T, turn string) model.ChatDone {
	t.Helper()
	ev := f.wait(t, "the done event of turn "+turn, func(ev model.ChatEvent) bool {
		return ev.Kind == model.ChatEventDone && ev.Turn == turn
	})
	return *ev.Done
}

// kinds are the kinds of the events seen so far.
func (f *chatFollower) kinds() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, ev := range f.evs {
		out[ev.Kind]++
	}
	return out
}

// driveChat runs every verb of the chat service through libs/client, with a
// scripted local model (services/chat/llmtest) behind a profile without an
// API key: a new conversation with context whose model calls a tool the
// profile asks approval for (seen on chat.pending, answered on chat.approve),
// a second turn of it, a turn cancelled while it streams, and the error
// replies (unknown profile, conversation and call, a call answered twice, a
// stale profile revision, context for an existing conversation, a blank
// message). A second profile stores an API key, sealed on its way to the
// credential service, then removes it and is deleted.
func driveChat(t *testing.T, ctx context.Context, sys *stack.Stack, sec secrets, bad deliberate) {
	t.Helper()
	cl := sys.Client
	subj := bus.NewSubjects("")
	llm := llmtest.Start(t, "")

	// Profiles.
	local := model.Profile{Name: "schema-local", Provider: model.ChatProviderOpenAI, Model: "schema-model", BaseURL: llm.OpenAIBaseURL(),
		SystemPrompt: "Answer briefly.", MaxSteps: 4, MaxTurnDuration: model.Duration(time.Minute), MaxTokensPerTurn: 100000,
		ToolFilter: model.ChatToolFilter{Include: []string{"schema__*"}, Exclude: []string{"schema__sleep"}},
		Approval:   model.ApprovalPolicy{Default: model.ApprovalAllow, Rules: []model.ApprovalRule{{Tool: "schema__echo", Decision: model.ApprovalAsk}}},
		Prices:     &model.ChatPrices{InputPerMTok: 1, OutputPerMTok: 2, Currency: "USD"}}
	stored, err := cl.PutProfile(ctx, local, client.ProfileKey{})
	if err != nil || stored.HasAPIKey || stored.Revision == 0 || stored.APIKeyRef != model.ChatProfileCredentialID(local.Name) || stored.CreatedAt.IsZero() {
		t.Fatalf("chat.profiles.put %s: %v %+v", local.Name, err, stored)
	}
	keyed, err := cl.PutProfile(ctx, model.Profile{Name: "schema-keyed", Provider: model.ChatProviderAnthropic, Model: "claude-schema"},
		client.ProfileKey{Set: sec.value("chat-profile-key")})
	if err != nil || !keyed.HasAPIKey {
		t.Fatalf("chat.profiles.put with a key: %v %+v", err, keyed)
	}
	if got, err := cl.GetProfile(ctx, keyed.Name); err != nil || !got.HasAPIKey || got.Revision != keyed.Revision {
		t.Fatalf("chat.profiles.get %s: %v %+v", keyed.Name, err, got)
	}
	if list, err := cl.ListProfiles(ctx); err != nil || len(list) != 2 || list[0].Name != keyed.Name || list[1].Name != local.Name {
		t.Fatalf("chat.profiles.list: %v %+v", err, list)
	}
	edit := keyed
	edit.SystemPrompt = "Be kind."
	unkeyed, err := cl.PutProfile(ctx, edit, client.ProfileKey{Remove: true})
	if err != nil || unkeyed.HasAPIKey || unkeyed.Revision <= keyed.Revision || !unkeyed.CreatedAt.Equal(keyed.CreatedAt) {
		t.Fatalf("chat.profiles.put removing the key: %v %+v", err, unkeyed)
	}
	_, err = cl.PutProfile(ctx, edit, client.ProfileKey{}) // edit still names keyed's revision
	wantCode(t, "chat.profiles.put with a stale revision", err, apierr.Conflict)
	badProfile := model.ChatProfilePutRequest{Profile: model.Profile{Name: "schema-bad", Provider: "gemini", Model: "x"}}
	bad.add("chat.profiles.put", badProfile)
	_, err = cl.PutProfile(ctx, badProfile.Profile, client.ProfileKey{})
	wantCode(t, "chat.profiles.put of an unknown provider", err, apierr.Validation)
	if err := cl.DeleteProfile(ctx, keyed.Name); err != nil {
		t.Fatalf("chat.profiles.delete %s: %v", keyed.Name, err)
	}
	wantCode(t, "chat.profiles.delete of a deleted profile", cl.DeleteProfile(ctx, keyed.Name), apierr.NotFound)
	_, err = cl.GetProfile(ctx, "schema-ghost")
	wantCode(t, "chat.profiles.get of an unknown profile", err, apierr.NotFound)

	// A new conversation (its id chosen by the client, so it can follow the
	// events first) with context; the model calls a tool the profile asks
	// approval for, then answers.
	const conv = "schema-conversation"
	events := followChat(t, cl, conv)
	llm.Enqueue(llmtest.ToolCalls(llmtest.Call("schema__echo", `{"message":"from the model"}`)), llmtest.Text("The server said: from the model."))
	sent, err := cl.ChatSend(ctx, model.ChatSendRequest{Conversation: conv, Profile: local.Name, Message: "Echo something.",
		Context: []model.ChatContextMessage{
			{Role: model.ChatRoleSystem, Content: "The user is testing."},
			{Role: model.ChatRoleUser, Content: "Hello?"},
			{Role: model.ChatRoleAssistant, Content: "Hello. What shall I do?"},
		}})
	if err != nil || sent.Conversation != conv || sent.Turn == "" || sent.Events != subj.Event("chat", conv) {
		t.Fatalf("chat.send: %v %+v", err, sent)
	}
	asked := events.wait(t, "the awaiting_approval event", func(ev model.ChatEvent) bool {
		return ev.Kind == model.ChatEventToolCall && ev.ToolCall.State == model.ToolCallAwaitingApproval
	})
	// The event comes just before the call is recorded as pending.
	var pending []model.ChatToolCall
	waitFor(t, "the pending call", 10*time.Second, func() bool {
		var p model.ChatPendingReply
		p, err = cl.ChatPending(ctx, conv)
		pending = p.Calls
		return err == nil && len(pending) == 1
	})
	if p := pending[0]; p.CallID != asked.ToolCall.CallID || p.Tool != "schema__echo" || p.State != model.ToolCallAwaitingApproval {
		t.Fatalf("chat.pending: %+v, the event said %+v", p, asked.ToolCall)
	}
	approve := model.ChatApproveRequest{Conversation: conv, CallID: asked.ToolCall.CallID, Decision: model.DecisionApprove}
	if got, err := cl.ChatApprove(ctx, approve); err != nil || got != approve {
		t.Fatalf("chat.approve: %v %+v", err, got)
	}
	_, err = cl.ChatApprove(ctx, approve)
	wantCode(t, "chat.approve of a call answered already", err, apierr.Conflict)
	_, err = cl.ChatApprove(ctx, model.ChatApproveRequest{Conversation: conv, CallID: "call_nobody_made", Decision: model.DecisionDeny})
	wantCode(t, "chat.approve of an unknown call", err, apierr.NotFound)
	if d := events.done(t, sent.Turn); d.Reason != model.TurnFinal || d.Steps != 2 {
		t.Fatalf("the first turn ended with %+v, want final after 2 steps", d)
	}
	events.wait(t, "the completed tool call", func(ev model.ChatEvent) bool {
		return ev.Kind == model.ChatEventToolCall && ev.ToolCall.State == model.ToolCallCompleted && ev.ToolCall.CallID == approve.CallID
	})
	if pending, err := cl.ChatPending(ctx, conv); err != nil || len(pending.Calls) != 0 || pending.Inputs == nil {
		t.Fatalf("chat.pending after the approval: %v %+v", err, pending)
	}

	// The conversation goes on with its own profile (context is for new ones
	// only); the model's tool call has broken arguments: refused, it fails.
	_, err = cl.ChatSend(ctx, model.ChatSendRequest{Conversation: conv, Message: "Again?",
		Context: []model.ChatContextMessage{{Role: model.ChatRoleUser, Content: "Earlier."}}})
	wantCode(t, "chat.send with context to an existing conversation", err, apierr.Validation)
	llm.Enqueue(llmtest.ToolCalls(llmtest.Call("schema__echo", `{"message":`)), llmtest.Text("Second answer."))
	second, err := cl.ChatSend(ctx, model.ChatSendRequest{Conversation: conv, Message: "Again?"})
	if err != nil || second.Conversation != conv || second.Turn == sent.Turn {
		t.Fatalf("chat.send of a second turn: %v %+v", err, second)
	}
	if d := events.done(t, second.Turn); d.Reason != model.TurnFinal || d.Steps != 2 {
		t.Fatalf("the second turn ended with %+v, want final after 2 steps", d)
	}
	events.wait(t, "the failed tool call", func(ev model.ChatEvent) bool {
		return ev.Kind == model.ChatEventToolCall && ev.Turn == second.Turn && ev.ToolCall.State == model.ToolCallFailed
	})
	for _, kind := range []string{model.ChatEventTextDelta, model.ChatEventToolCall, model.ChatEventUsage, model.ChatEventDone} {
		if events.kinds()[kind] == 0 {
			t.Errorf("conversation %s: no %s event", conv, kind)
		}
	}
	// Nothing runs now: cancel answers with the conversation alone.
	if c, err := cl.ChatCancel(ctx, model.ChatCancelRequest{Conversation: conv}); err != nil || c.Conversation != conv || c.Turn != "" || c.Done != nil {
		t.Fatalf("chat.cancel with no turn running: %v %+v", err, c)
	}

	if after, err := cl.ChatWatch(ctx, conv); err != nil || after != 0 {
		t.Fatalf("chat.watch: %v, after %d (no earlier conversation had this id)", err, after)
	}
	hist, err := cl.ChatHistory(ctx, conv)
	if err != nil || hist.Conversation != conv {
		t.Fatalf("chat.history: %v %+v", err, hist)
	}
	kinds := map[string]int{}
	for i, e := range hist.Entries {
		kinds[e.Kind]++
		if e.Seq != uint64(i+1) {
			t.Errorf("chat.history: entry %d has seq %d", i, e.Seq)
		}
	}
	// (The loop keeps the model's tool calls in its model_step entries: it
	// writes no tool_call entry.)
	for _, kind := range []string{model.EntryInstructions, model.EntryUserMessage, model.EntryModelStep,
		model.EntryApproval, model.EntryToolResult, model.EntryTurnEnd} {
		if kinds[kind] == 0 {
			t.Errorf("chat.history: no %s entry in %v", kind, kinds)
		}
	}

	// A turn cancelled while the model streams slowly.
	const cancelled = "schema-cancelled"
	cevents := followChat(t, cl, cancelled)
	llm.Enqueue(llmtest.Slow(llmtest.Text("one two three four five six seven eight nine ten"), 200*time.Millisecond))
	slow, err := cl.ChatSend(ctx, model.ChatSendRequest{Conversation: cancelled, Profile: local.Name, Message: "Count slowly."})
	if err != nil {
		t.Fatalf("chat.send of a slow turn: %v", err)
	}
	cevents.wait(t, "the first text of the slow turn", func(ev model.ChatEvent) bool {
		return ev.Kind == model.ChatEventTextDelta && ev.Turn == slow.Turn
	})
	c, err := cl.ChatCancel(ctx, model.ChatCancelRequest{Conversation: cancelled, Turn: slow.Turn})
	if err != nil || c.Turn != slow.Turn || c.Done == nil || c.Done.Reason != model.TurnCancelled {
		t.Fatalf("chat.cancel of a running turn: %v %+v", err, c)
	}
	if d := cevents.done(t, slow.Turn); d.Reason != model.TurnCancelled {
		t.Fatalf("the cancelled turn's done event: %+v", d)
	}

	if list, err := cl.ChatList(ctx); err != nil || !slices.ContainsFunc(list, func(c model.ChatConversation) bool {
		return c.Conversation == conv && c.Entries == uint64(len(hist.Entries)) && c.LastSeq == c.Entries
	}) {
		t.Fatalf("chat.list: %v %+v", err, list)
	}
	if err := cl.ChatDelete(ctx, cancelled); err != nil {
		t.Fatalf("chat.delete: %v", err)
	}
	_, err = cl.ChatHistory(ctx, cancelled)
	wantCode(t, "chat.history of a deleted conversation", err, apierr.NotFound)
	wantCode(t, "chat.delete of a deleted conversation", cl.ChatDelete(ctx, cancelled), apierr.NotFound)

	driveChatInput(t, ctx, cl, llm, local.Name, bad)

	// Errors of chat.send: an unknown profile, a blank message.
	_, err = cl.ChatSend(ctx, model.ChatSendRequest{Profile: "schema-ghost", Message: "hi"})
	wantCode(t, "chat.send with an unknown profile", err, apierr.NotFound)
	blank := model.ChatSendRequest{Profile: local.Name, Message: "   "}
	bad.add("chat.send", blank)
	_, err = cl.ChatSend(ctx, blank)
	wantCode(t, "chat.send of a blank message", err, apierr.Validation)

	if n := llm.Attempts(); n != 7 {
		t.Errorf("the model was asked %d times, want 7 (two steps, two, the cancelled one, two with a request for input)", n)
	}
}

// driveChatInput runs a turn whose tool call's server asks the user for
// input (the test server's ask tool, a form elicitation): the
// input_requested event, chat.pending listing it, answers refused (content
// that misfits the form, an action the schema lacks), the accepted answer
// reaching the server, then the answered input's CONFLICT and an unknown
// one's NOT_FOUND, and the input_answered event.
func driveChatInput(t *testing.T, ctx context.Context, cl *client.Client, llm *llmtest.Server, profile string, bad deliberate) {
	t.Helper()
	const conv = "schema-input"
	events := followChat(t, cl, conv)
	llm.Enqueue(llmtest.ToolCalls(llmtest.Call("schema__ask", `{"message":"Your name?"}`)), llmtest.Text("Greeted."))
	sent, err := cl.ChatSend(ctx, model.ChatSendRequest{Conversation: conv, Profile: profile, Message: "Greet me."})
	if err != nil {
		t.Fatalf("chat.send of a turn that asks for input: %v", err)
	}
	asked := events.wait(t, "the input_requested event", func(ev model.ChatEvent) bool {
		return ev.Kind == model.ChatEventInputRequested && ev.Turn == sent.Turn
	}).Input
	var pending model.ChatPendingReply
	waitFor(t, "the pending input", 10*time.Second, func() bool {
		pending, err = cl.ChatPending(ctx, conv)
		return err == nil && len(pending.Inputs) == 1
	})
	if p := pending.Inputs[0]; p.InputID != asked.InputID || p.Server != "schema" || p.Tool != "schema__ask" || len(pending.Calls) != 0 {
		t.Fatalf("chat.pending: %+v, the event said %+v", pending, asked)
	}
	_, err = cl.ChatAnswer(ctx, model.ChatAnswerRequest{Conversation: conv, InputID: asked.InputID, Action: model.InputAccept,
		Content: map[string]any{"name": "schema", "age": 300}})
	if e := apierr.From(err); e.Code != apierr.Validation || e.Field != "age" {
		t.Fatalf("chat.answer with an age out of bounds: %v, want VALIDATION_ERROR on age", err)
	}
	maybe := model.ChatAnswerRequest{Conversation: conv, InputID: asked.InputID, Action: "maybe"}
	bad.add("chat.answer", maybe)
	_, err = cl.ChatAnswer(ctx, maybe)
	wantCode(t, "chat.answer with an unknown action", err, apierr.Validation)
	accept := model.ChatAnswerRequest{Conversation: conv, InputID: asked.InputID, Action: model.InputAccept,
		Content: map[string]any{"name": "schema", "age": 7.0, "colour": "blue"}}
	if got, err := cl.ChatAnswer(ctx, accept); err != nil || got.InputID != accept.InputID || got.Content["colour"] != "blue" {
		t.Fatalf("chat.answer: %v %+v", err, got)
	}
	if d := events.done(t, sent.Turn); d.Reason != model.TurnFinal {
		t.Fatalf("the turn that asked for input ended with %+v", d)
	}
	if body := string(llm.Last().Body); !strings.Contains(body, "hello schema, age 7, colour blue") {
		t.Fatalf("the answer did not reach the server's result: %s", body)
	}
	answered := events.wait(t, "the input_answered event", func(ev model.ChatEvent) bool {
		return ev.Kind == model.ChatEventInputAnswered && ev.Turn == sent.Turn
	}).Input
	if answered.InputID != asked.InputID || answered.Action != model.InputAccept {
		t.Fatalf("input_answered: %+v", answered)
	}
	_, err = cl.ChatAnswer(ctx, model.ChatAnswerRequest{Conversation: conv, InputID: asked.InputID, Action: model.InputDecline})
	wantCode(t, "chat.answer of an input answered already", err, apierr.Conflict)
	_, err = cl.ChatAnswer(ctx, model.ChatAnswerRequest{Conversation: conv, InputID: "no-such-input", Action: model.InputCancel})
	wantCode(t, "chat.answer of an unknown input", err, apierr.NotFound)
}

// checkChatLog validates every entry stored in MCP_CHAT and that each
// conversation's entries are numbered from 1 without gaps.
func checkChatLog(t *testing.T, reg *registry, js jetstream.JetStream, s bus.Subjects) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, bus.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root := s.Service("chat", "log") + "."
	next := map[string]uint64{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged with its conversation
		}
		if err != nil {
			t.Fatalf("reading entry %d: %v", seq, err)
		}
		src := fmt.Sprintf("stream %s #%d", m.Subject, seq)
		conv, ok := strings.CutPrefix(m.Subject, root)
		if !ok || !model.ValidConversationID(conv) {
			t.Errorf("%s: not a conversation log subject", src)
			continue
		}
		if reg.check(t, "chat-entry", src, m.Data) {
			var e model.ChatEntry
			_ = json.Unmarshal(m.Data, &e)
			if want := next[conv] + 1; e.Seq != want {
				t.Errorf("%s: seq %d, want %d", src, e.Seq, want)
			}
			next[conv] = e.Seq
		}
	}
	if len(next) == 0 {
		t.Error("the stream MCP_CHAT holds no conversation")
	}
}
