package schema

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestChatModelMatchesSchemas: the Go types of the chat contract
// (libs/model/chat.go), as they marshal, match their schemas, and each
// schema rejects an unknown member. TestRealMessages checks the real
// traffic of the chat service; this covers the values it does not produce
// (error and usage events with a cost, timed-out calls, every member of a
// profile, a sealed key…) and every chat schema, served or not.
func TestChatModelMatchesSchemas(t *testing.T) {
	r := loadRegistry(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	cost := 0.0012
	profile := model.Profile{Name: "work", Provider: model.ChatProviderOpenAI, Model: "gpt-4o-mini", BaseURL: "http://localhost:11434/v1",
		SystemPrompt: "Use the tools.", MaxTurnDuration: model.Duration(5 * time.Minute), MaxTokensPerTurn: 100000,
		ToolFilter: model.ChatToolFilter{Include: []string{"github__*"}, Exclude: []string{"*__delete_*"}},
		Approval:   model.ApprovalPolicy{Default: model.ApprovalAsk, Rules: []model.ApprovalRule{{Tool: "github__list_*", Decision: model.ApprovalAllow}}},
		Prices:     &model.ChatPrices{InputPerMTok: 0.15, OutputPerMTok: 0.6, Currency: "USD"},
		APIKeyRef:  model.ChatProfileCredentialID("work"), HasAPIKey: true, CreatedAt: at, UpdatedAt: at, Revision: 3}
	profile.Normalize()
	if err := profile.Validate(); err != nil {
		t.Fatal(err)
	}
	minimal := model.Profile{Name: "local", Provider: model.ChatProviderAnthropic, Model: "claude-sonnet-4-5"}
	entry := model.ChatEntry{Seq: 1, Kind: model.EntryUserMessage, Turn: "t1", Payload: json.RawMessage(`{"text":"hi"}`), At: at}
	s := bus.NewSubjects("")
	waiting := model.ChatToolCall{CallID: "call_1", Tool: "github__delete_repo", State: model.ToolCallAwaitingApproval, Arguments: json.RawMessage(`{"repo":"x"}`)}
	input := model.ChatInput{InputID: "0b7c2f1e-6f7d-4a8e-9c55-2a8f3c1d9e10", CallID: "call_1", Tool: "tm__ask", Server: "tm",
		Message: "Who are you?", RequestedSchema: json.RawMessage(`{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`),
		AskedAt: at, ExpiresAt: at.Add(time.Minute)}
	answered := input
	answered.Action, answered.Reason = model.InputCancel, "nobody answered within 5m0s, so the input was cancelled"
	approve := model.ChatApproveRequest{Conversation: "c1", CallID: "call_1", Decision: model.DecisionDeny}
	sealed := sealedKey(t)
	docs := []modelDoc{
		{"chat-profile", profile},
		{"chat-profile", minimal},
		{"chat-send-request", model.ChatSendRequest{Profile: "work", Message: "hi"}},
		{"chat-send-request", model.ChatSendRequest{Conversation: "c1", Message: "hi"}},
		{"chat-send-request", model.ChatSendRequest{Profile: "work", Message: "hi", Context: []model.ChatContextMessage{
			{Role: model.ChatRoleSystem, Content: "Be terse."}, {Role: model.ChatRoleUser, Content: "Hello?"}, {Role: model.ChatRoleAssistant, Content: ""}}}},
		{"chat-send-reply", model.ChatSendReply{Conversation: "c1", Turn: "t1", Events: s.Event("chat", "c1")}},
		{"chat-conversation-ref", model.ChatConversationRef{Conversation: "c1"}},
		{"chat-watch-reply", model.ChatWatchReply{Conversation: "c1"}},
		{"chat-watch-reply", model.ChatWatchReply{Conversation: "c1", After: 42}},
		{"chat-cancel-request", model.ChatCancelRequest{Conversation: "c1"}},
		{"chat-cancel-reply", model.ChatCancelReply{Conversation: "c1"}},
		{"chat-cancel-reply", model.ChatCancelReply{Conversation: "c1", Turn: "t1", Done: &model.ChatDone{Reason: model.TurnCancelled, Message: "Cancelled.", Steps: 1}}},
		{"chat-approve-request", model.ChatApproveRequest{Conversation: "c1", CallID: "call_1", Decision: model.DecisionApproveConversation}},
		{"chat-approve-request", model.ChatApproveReply(approve)},
		{"chat-conversation-ref", model.ChatPendingRequest{Conversation: "c1"}},
		{"chat-pending-reply", model.ChatPendingReply{Conversation: "c1", Calls: []model.ChatToolCall{waiting}, Inputs: []model.ChatInput{}}},
		{"chat-pending-reply", model.ChatPendingReply{Conversation: "c1", Calls: []model.ChatToolCall{}, Inputs: []model.ChatInput{input}}},
		{"chat-answer-request", model.ChatAnswerRequest{Conversation: "c1", InputID: input.InputID, Action: model.InputAccept,
			Content: map[string]any{"name": "Ada", "age": 36, "subscribe": true}}},
		{"chat-answer-request", model.ChatAnswerReply{Conversation: "c1", InputID: input.InputID, Action: model.InputCancel}},
		{"chat-send-request", model.ChatSendRequest{Profile: "work", Message: "hi", NoInput: true}},
		{"chat-event", model.ChatEvent{Kind: model.ChatEventInputRequested, Conversation: "c1", Turn: "t1", Input: &input, At: at}},
		{"chat-event", model.ChatEvent{Kind: model.ChatEventInputAnswered, Conversation: "c1", Turn: "t1", Input: &answered, At: at}},
		{"chat-profile-put-request", model.ChatProfilePutRequest{Profile: profile, SealedSecrets: sealed}},
		{"chat-profile-put-request", model.ChatProfilePutRequest{Profile: minimal, RemoveAPIKey: true}},
		{"chat-profile-ref", model.ChatProfileRef{Name: "work"}},
		{"chat-profile-list-request", model.ChatProfileListRequest{}},
		{"chat-profile-list-reply", model.ChatProfileListReply{Profiles: []model.Profile{profile, minimal}}},
		{"chat-profile-list-reply", model.ChatProfileListReply{Profiles: []model.Profile{}}},
		{"chat-list-request", model.ChatListRequest{}},
		{"chat-list-reply", model.ChatListReply{Conversations: []model.ChatConversation{{Conversation: "c1", Entries: 2, LastSeq: 2, LastActivity: at}}}},
		{"chat-list-reply", model.ChatListReply{Conversations: []model.ChatConversation{}}},
		{"chat-entry", entry},
		{"chat-entry", model.ChatEntry{Seq: 2, Kind: model.EntryTurnEnd, Turn: "t1", At: at}},
		{"chat-entry", model.ChatEntry{Seq: 3, Kind: model.EntryInstructions, Turn: "t2", Payload: json.RawMessage(`{"text":"Be terse."}`), At: at}},
		{"chat-history-reply", model.ChatHistoryReply{Conversation: "c1", Entries: []model.ChatEntry{entry}}},
		{"chat-audit-event", model.ChatAuditEvent{Action: model.ChatAuditDelete, Conversation: "c1", Principal: "key:k1", Owner: "key:k2", AsAdmin: true, Turn: "t1", At: at}},
		{"chat-event", model.ChatEvent{Kind: model.ChatEventTextDelta, Conversation: "c1", Turn: "t1", Text: "Hel", At: at}},
		{"chat-event", model.ChatEvent{Kind: model.ChatEventToolCall, Conversation: "c1", Turn: "t1", At: at, ToolCall: &model.ChatToolCall{
			CallID: "call_1", Tool: "github__list_repos", State: model.ToolCallTimedOut, Arguments: json.RawMessage(`{"owner":"x"}`), Summary: "Tool call timed out after 30s", DurationMS: 30000}}},
		{"chat-event", model.ChatEvent{Kind: model.ChatEventUsage, Conversation: "c1", Turn: "t1", At: at, Usage: &model.ChatUsage{Step: 1, InputTokens: 10, OutputTokens: 2, Cost: &cost, Currency: "USD"}}},
		{"chat-event", model.ChatEvent{Kind: model.ChatEventError, Conversation: "c1", Turn: "t1", At: at, Error: apierr.New(apierr.RateLimited, "Rate limited. Try again in 4 seconds.")}},
		{"chat-event", model.ChatEvent{Kind: model.ChatEventDone, Conversation: "c1", Turn: "t1", At: at, Done: &model.ChatDone{Reason: model.TurnMaxSteps, Message: "Stopped after 20 steps.", Steps: 20}}},
	}
	seen := checkModelDocs(t, r, docs)
	for _, name := range r.files {
		if strings.HasPrefix(name, "chat-") && !seen[name] {
			t.Errorf("no Go value checked against schemas/%s.json", name)
		}
	}
}

// sealedKey seals a profile's API key as libs/client does (to a fresh
// curve key standing in for the credential service's).
func sealedKey(t *testing.T) model.SealedSecrets {
	t.Helper()
	recipient, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	sender, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	rpub, _ := recipient.PublicKey()
	spub, _ := sender.PublicKey()
	creds := model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: "sk-schema"}}
	sealed, err := sender.Seal(mustJSON(t, creds), rpub)
	if err != nil {
		t.Fatal(err)
	}
	names := creds.Names()
	return model.SealedSecrets{Sealed: sealed, SenderKey: spub, Names: &names}
}
