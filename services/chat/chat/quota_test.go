package chat

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
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

// TestDeleteRefundsOnce: a conversation's charge is given back once,
// however many deletes of it race (a client's retries, a double click), and
// deleting a conversation whose turn runs gives back what the turn appended
// too: what the principal is charged stays what their conversations hold.
// Before, each racing delete gave the charge back again (the principal's
// other conversations then held more than the quota let them), and the
// cancelled turn's own charge, made after the delete's refund, stayed on
// the principal for a conversation that no longer exists.
func TestDeleteRefundsOnce(t *testing.T) {
	e := newEnv(t)
	s, _ := e.startServiceOpts(t, 0, Options{PrincipalQuotaMiB: 16})
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	a := principal.Key("a", false, model.ToolFilter{})
	msg := strings.Repeat("x", 100<<10)
	send := func(conv string, reply llmtest.Reply) *follow {
		t.Helper()
		f := e.follow(t, conv)
		e.llm.Enqueue(reply)
		if err := e.as(t, a, "send", model.ChatSendRequest{Conversation: conv, Profile: "p", Message: msg}, nil); err != nil {
			t.Fatal(err)
		}
		return f
	}
	send("keep", llmtest.Text("kept")).done(t, 1, 20*time.Second)
	// A is charged for keep alone (its turn's end is charged just after
	// its done event).
	want := func(what string) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			keep, _, err := s.ownerRecord(t.Context(), "keep")
			if err != nil || keep.Charged < int64(len(msg)) {
				return false, fmt.Sprintf("keep's charge: %+v %v", keep, err)
			}
			used, _, err := s.usage(t.Context(), a.ID)
			return err == nil && used == keep.Charged, fmt.Sprintf("%s: A is charged %d (%v), keep holds %d", what, used, err, keep.Charged)
		})
	}
	want("with one conversation")

	// Racing deletes of one conversation.
	send("gone", llmtest.Text("soon gone")).done(t, 1, 20*time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := e.as(t, a, "delete", model.ChatConversationRef{Conversation: "gone"}, nil)
			if c := apierr.Of(err); err != nil && c != apierr.NotFound && c != apierr.Conflict {
				t.Errorf("a racing delete: %v", err)
			}
		})
	}
	wg.Wait()
	want("after racing deletes")

	// A delete during a turn: the turn's answer is appended, charged and
	// given back.
	f := send("running", llmtest.Slow(llmtest.Text(strings.Repeat("y", 200<<10)), 300*time.Millisecond))
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return e.llm.Pending() == 0, "the model was not asked yet"
	})
	if err := e.as(t, a, "delete", model.ChatConversationRef{Conversation: "running"}, nil); err != nil {
		t.Fatal(err)
	}
	f.done(t, 1, 20*time.Second)
	want("after deleting a running conversation")
}
