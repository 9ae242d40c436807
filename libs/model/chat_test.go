package model

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

func TestProfileValidate(t *testing.T) {
	ok := Profile{Name: "work", Provider: " OpenAI ", Model: "gpt-4o-mini"}
	ok.Normalize()
	if e := ok.Validate(); e != nil {
		t.Fatal(e)
	}
	if ok.Provider != ChatProviderOpenAI || ok.MaxSteps != DefaultChatMaxSteps {
		t.Fatalf("normalized %+v", ok)
	}
	bad := []struct {
		f     func(p *Profile)
		field string
	}{
		{func(p *Profile) { p.Name = "" }, "name"},
		{func(p *Profile) { p.Name = "a.b" }, "name"},
		{func(p *Profile) { p.Provider = "gemini" }, "provider"},
		{func(p *Profile) { p.Model = "" }, "model"},
		{func(p *Profile) { p.Model = "a\nb" }, "model"},
		{func(p *Profile) { p.BaseURL = "localhost:11434" }, "base_url"},
		{func(p *Profile) { p.BaseURL = "https://k:s@x.example" }, "base_url"},
		{func(p *Profile) { p.APIKeyRef = uuid.NewString() }, "api_key_ref"},
		{func(p *Profile) { p.SystemPrompt = strings.Repeat("x", MaxChatSystemPrompt+1) }, "system_prompt"},
		{func(p *Profile) { p.MaxSteps = MaxChatMaxSteps + 1 }, "max_steps"},
		{func(p *Profile) { p.MaxTokensPerTurn = -1 }, "max_tokens_per_turn"},
		{func(p *Profile) { p.ToolBudget = -1 }, "tool_budget"},
		{func(p *Profile) { p.ToolBudget = MaxChatToolBudget + 1 }, "tool_budget"},
		{func(p *Profile) { p.MaxTurnDuration = -1 }, "max_turn_duration"},
		{func(p *Profile) { p.ToolFilter.Include = []string{"a["} }, "tool_filter.include"},
		{func(p *Profile) { p.Approval.Default = "never" }, "approval.default"},
		{func(p *Profile) { p.Approval.Rules = []ApprovalRule{{Tool: " ", Decision: ApprovalAsk}} }, "approval.rules.0.tool"},
		{func(p *Profile) { p.Prices = &ChatPrices{OutputPerMTok: -2} }, "prices.output_per_mtok"},
	}
	for _, c := range bad {
		p := ok
		c.f(&p)
		e := p.Validate()
		if e == nil || e.Code != apierr.Validation || e.Field != c.field {
			t.Errorf("want VALIDATION_ERROR on %s, got %v", c.field, e)
		}
	}
	withRef := ok
	withRef.APIKeyRef = ChatProfileCredentialID("work")
	if e := withRef.Validate(); e != nil {
		t.Errorf("the derived api_key_ref is refused: %v", e)
	}
}

func TestChatPolicies(t *testing.T) {
	f := ChatToolFilter{Include: []string{"github__*", "fs__read_*"}, Exclude: []string{"*__delete_*"}}
	for name, want := range map[string]bool{"github__list": true, "github__delete_repo": false, "fs__read_file": true, "fs__write_file": false} {
		if f.Allows(name) != want {
			t.Errorf("filter allows %s: %v", name, !want)
		}
	}
	if !(ChatToolFilter{}).Allows("x__y") {
		t.Error("the empty filter refuses")
	}
	p := ApprovalPolicy{Default: ApprovalAsk, Rules: []ApprovalRule{{Tool: "*__delete_*", Decision: ApprovalDeny}, {Tool: "github__*", Decision: ApprovalAllow}}}
	for name, want := range map[string]string{"github__delete_repo": ApprovalDeny, "github__list": ApprovalAllow, "fs__write": ApprovalAsk} {
		if got := p.Decide(name); got != want {
			t.Errorf("decide %s: %s, want %s", name, got, want)
		}
	}
	if (ApprovalPolicy{}).Decide("x__y") != ApprovalAllow {
		t.Error("the empty policy does not allow")
	}
	if c := (ChatPrices{InputPerMTok: 3, OutputPerMTok: 15}).Cost(1_000_000, 100_000); c != 4.5 {
		t.Errorf("cost %v", c)
	}
}

func TestChatProfileCredentialID(t *testing.T) {
	a, b := ChatProfileCredentialID("work"), ChatProfileCredentialID("work")
	u, err := uuid.Parse(a)
	if err != nil || u.String() != a || a != b || u.Version() != 5 {
		t.Fatalf("id %q: %v", a, err)
	}
	if ChatProfileCredentialID("home") == a || a == RegistryCredentialsID {
		t.Fatal("ids collide")
	}
}

func TestChatRequests(t *testing.T) {
	check := func(e *apierr.Error, field string) {
		t.Helper()
		if field == "" {
			if e != nil {
				t.Errorf("unexpected %v", e)
			}
			return
		}
		if e == nil || e.Code != apierr.Validation || e.Field != field {
			t.Errorf("want VALIDATION_ERROR on %s, got %v", field, e)
		}
	}
	check((&ChatSendRequest{Profile: "work", Message: "hi"}).Validate(), "")
	check((&ChatSendRequest{Conversation: "c1", Message: "hi"}).Validate(), "")
	check((&ChatSendRequest{Profile: "work", Message: " \n"}).Validate(), "message")
	check((&ChatSendRequest{Profile: "work"}).Validate(), "message")
	check((&ChatSendRequest{Message: "hi"}).Validate(), "profile")
	check((&ChatSendRequest{Profile: "Work!", Message: "hi"}).Validate(), "profile")
	for _, id := range []string{"a.b", "a*", "a>", "a b"} {
		check((&ChatSendRequest{Conversation: id, Message: "hi"}).Validate(), "conversation")
		check((&ChatConversationRef{Conversation: id}).Validate(), "conversation")
	}
	check((&ChatSendRequest{Profile: "w", Message: strings.Repeat("x", MaxChatMessage+1)}).Validate(), "message")
	check((&ChatConversationRef{}).Validate(), "conversation")
	check((&ChatCancelRequest{Conversation: "c1"}).Validate(), "")
	check((&ChatApproveRequest{Conversation: "c1", CallID: "call_1", Decision: DecisionDeny}).Validate(), "")
	check((&ChatApproveRequest{Conversation: "c1", Decision: DecisionDeny}).Validate(), "call_id")
	check((&ChatApproveRequest{Conversation: "c1", CallID: "x", Decision: "ok"}).Validate(), "decision")
	check((&ChatEntry{Kind: EntryApproval, Turn: "t1", Payload: json.RawMessage(`{"decision":"approve"}`)}).Validate(), "")
	check((&ChatEntry{Kind: EntryApproval, Turn: "t1", Payload: json.RawMessage(`null`)}).Validate(), "payload")
	check((&ChatEntry{Kind: EntryApproval}).Validate(), "turn")
}
