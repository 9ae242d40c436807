package chat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestPrincipalQuota: one principal's conversations hold at most
// --chat-principal-quota of the shared log: past it their sends are
// refused (RATE_LIMITED), another principal's are not, and deleting a
// conversation gives its share back. What a turn appends (the model's
// answer) counts too.
func TestPrincipalQuota(t *testing.T) {
	e := newEnv(t)
	e.startServiceOpts(t, 0, Options{PrincipalQuotaMiB: 1})
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	a := principal.Key("a", false, model.ToolFilter{})
	b := principal.Key("b", false, model.ToolFilter{})
	big := strings.Repeat("x", model.MaxChatMessage-1024) // ~255 KiB a send

	send := func(p principal.Principal, conv string) error {
		t.Helper()
		f := e.follow(t, conv)
		e.llm.Enqueue(llmtest.Text(strings.Repeat("y", 64<<10))) // a 64 KiB answer
		err := e.as(t, p, "send", model.ChatSendRequest{Conversation: conv, Profile: "p", Message: big}, nil)
		if err == nil {
			f.done(t, 1, 20*time.Second)
		}
		return err
	}
	// Three sends of ~320 KiB each (message and answer, as logged) fit in
	// 1 MiB; the fourth does not.
	var refused error
	for i := range 5 {
		if refused = send(a, fmt.Sprintf("a-%d", i)); refused != nil {
			if i != 3 {
				t.Fatalf("send %d refused: %v", i, refused)
			}
			break
		}
	}
	if apierr.Of(refused) != apierr.RateLimited || apierr.From(refused).Field != model.ChatQuotaField || !strings.Contains(apierr.From(refused).Message, "--chat-principal-quota") {
		t.Fatalf("A past the quota: %v, want RATE_LIMITED", refused)
	}
	// A's refused send claimed nothing: the id is free.
	if err := send(b, "a-3"); err != nil {
		t.Fatalf("B's send (another principal, the id A was refused): %v", err)
	}
	// A deletes one: room again.
	if err := e.as(t, a, "delete", model.ChatConversationRef{Conversation: "a-0"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := send(a, "a-4"); err != nil {
		t.Fatalf("A's send after a delete: %v", err)
	}
}

// TestUsageChargedUnderContention: many turns of one principal charging
// at once (one /v1 key's concurrent requests) are all counted: the
// compare-and-set retries spread out instead of giving up with CONFLICT.
func TestUsageChargedUnderContention(t *testing.T) {
	e := newEnv(t)
	s, _ := e.startServiceOpts(t, 0, Options{PrincipalQuotaMiB: 1})
	const n = 200
	errs := make(chan error, n)
	for range n {
		go func() { errs <- s.addUsage(t.Context(), "key:busy", 10, -1) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a charge under contention: %v", err)
		}
	}
	if used, _, err := s.usage(t.Context(), "key:busy"); err != nil || used != 10*n {
		t.Fatalf("usage %d (%v), want %d", used, err, 10*n)
	}
}
