package chat

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// as sends a request on mcp.v1.chat.<verb> in p's name (the header the
// gateway sets).
func (e *env) as(t *testing.T, p principal.Principal, verb string, in, out any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(principal.With(context.Background(), p), 20*time.Second)
	defer cancel()
	return bus.RequestJSON(ctx, e.nc, bus.NewSubjects("").Service("chat", verb), in, out, 20*time.Second)
}

// TestConversationOwners: a conversation is its first sender's; another
// principal gets NOT_FOUND for every verb, an admin may list, read and
// delete it but not act in it; a watch claims no id; one logged before owners existed is admins' only; a
// header that does not decode is refused.
func TestConversationOwners(t *testing.T) {
	e := newEnv(t)
	s, _ := e.startService(t, 0)
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	a := principal.Key("a", false, model.ToolFilter{})
	b := principal.Key("b", false, model.ToolFilter{})
	admin := principal.Key("root", true, model.ToolFilter{})

	e.llm.Enqueue(llmtest.Text("hi A"))
	f := e.follow(t, "conv-a")
	if err := e.as(t, a, "send", model.ChatSendRequest{Conversation: "conv-a", Profile: "p", Message: "A's secret"}, nil); err != nil {
		t.Fatal(err)
	}
	f.done(t, 1, 20*time.Second)
	ref := model.ChatConversationRef{Conversation: "conv-a"}
	for verb, in := range map[string]any{
		"history": ref, "pending": ref, "watch": ref, "delete": ref,
		"send":    model.ChatSendRequest{Conversation: "conv-a", Message: "B"},
		"cancel":  model.ChatCancelRequest{Conversation: "conv-a"},
		"approve": model.ChatApproveRequest{Conversation: "conv-a", CallID: "c1", Decision: model.DecisionApprove},
		"answer":  model.ChatAnswerRequest{Conversation: "conv-a", InputID: "i1", Action: model.InputDecline},
	} {
		err := e.as(t, b, verb, in, nil)
		if e := apierr.From(err); e.Code != apierr.NotFound || e.Message != "conversation conv-a not found" {
			t.Fatalf("B %s: %v, want the NOT_FOUND of a missing conversation", verb, err)
		}
	}
	var list model.ChatListReply
	if err := e.as(t, b, "list", model.ChatListRequest{}, &list); err != nil || len(list.Conversations) != 0 {
		t.Fatalf("B's list: %v %+v", err, list)
	}
	if err := e.as(t, a, "list", model.ChatListRequest{}, &list); err != nil || len(list.Conversations) != 1 || list.Conversations[0].Owner != a.ID {
		t.Fatalf("A's list: %v %+v", err, list)
	}

	// An admin reads it but may not act in it.
	var hist model.ChatHistoryReply
	if err := e.as(t, admin, "history", ref, &hist); err != nil || len(hist.Entries) == 0 {
		t.Fatalf("admin's history: %v", err)
	}
	if err := e.as(t, admin, "send", model.ChatSendRequest{Conversation: "conv-a", Message: "admin"}, nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("admin's send into A's: %v", err)
	}

	// A watch claims nothing: an id nobody has is NOT_FOUND, worded as
	// another's (the watch tells nobody whether an id is taken), and no
	// owner record is left behind (it would never expire, nor count in a
	// quota or a list).
	for i := range 3 {
		err := e.as(t, b, "watch", model.ChatWatchRequest{Conversation: "b-first"}, nil)
		if err == nil || apierr.From(err).Code != apierr.NotFound || apierr.From(err).Message != "conversation b-first not found" {
			t.Fatalf("B's watch %d of a free id: %v", i, err)
		}
	}
	if _, found, err := s.ownerOf(context.Background(), "b-first"); err != nil || found {
		t.Fatalf("a watch left an owner record: %v %v", found, err)
	}
	// So anyone may still take it, and then it is theirs to watch.
	e.llm.Enqueue(llmtest.Text("hi A again"))
	fb := e.follow(t, "b-first")
	if err := e.as(t, a, "send", model.ChatSendRequest{Conversation: "b-first", Profile: "p", Message: "A"}, nil); err != nil {
		t.Fatalf("A's send into the id B watched: %v", err)
	}
	fb.done(t, 1, 20*time.Second)
	if err := e.as(t, a, "watch", model.ChatWatchRequest{Conversation: "b-first"}, nil); err != nil {
		t.Fatalf("A's watch of its own: %v", err)
	}

	// Logged before owners existed: admins' only.
	if _, err := s.convs.Append(context.Background(), "legacy", model.ChatEntry{Kind: model.EntryUserMessage, Turn: "t1",
		Payload: []byte(`{"text":"old","profile":"p"}`)}); err != nil {
		t.Fatal(err)
	}
	legacy := model.ChatConversationRef{Conversation: "legacy"}
	if err := e.as(t, a, "history", legacy, nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("A reading a legacy conversation: %v", err)
	}
	if err := e.as(t, admin, "history", legacy, nil); err != nil {
		t.Fatalf("admin reading a legacy conversation: %v", err)
	}
	list = model.ChatListReply{} // decoding into the old slice would keep its owners
	if err := e.as(t, admin, "list", model.ChatListRequest{}, &list); err != nil ||
		!slices.ContainsFunc(list.Conversations, func(c model.ChatConversation) bool { return c.Conversation == "legacy" && c.Owner == "" }) ||
		!slices.ContainsFunc(list.Conversations, func(c model.ChatConversation) bool { return c.Conversation == "conv-a" && c.Owner == a.ID }) {
		t.Fatalf("admin's list: %v %+v", err, list)
	}

	// The admin deletes A's; A then finds nothing, and the id is free again.
	if err := e.as(t, admin, "delete", ref, nil); err != nil {
		t.Fatalf("admin's delete: %v", err)
	}
	if err := e.as(t, a, "history", ref, nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("A's history after the delete: %v", err)
	}
	if _, found, err := s.ownerOf(context.Background(), "conv-a"); err != nil || found {
		t.Fatalf("the owner outlived the conversation: %v %v", found, err)
	}

	// A header that does not decode is refused, not taken for the operator.
	msg := nats.NewMsg(bus.NewSubjects("").Service("chat", "list"))
	msg.Header.Set(principal.Header, "not-a-principal")
	msg.Data = []byte(`{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bus.Request(ctx, e.nc, msg, 0); apierr.Of(err) != apierr.Validation {
		t.Fatalf("a bad principal header: %v", err)
	}
}

// TestOwnedProfiles: an owned profile is its owner's and admins'; only
// admins write profiles.
func TestOwnedProfiles(t *testing.T) {
	e := newEnv(t)
	e.startService(t, 0)
	a := principal.Key("a", false, model.ToolFilter{})
	b := principal.Key("b", false, model.ToolFilter{})
	e.putProfile(t, model.Profile{Name: "shared", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.putProfile(t, model.Profile{Name: "mine", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL(), Owner: a.ID})

	names := func(p principal.Principal) []string {
		var out model.ChatProfileListReply
		if err := e.as(t, p, "profiles.list", model.ChatProfileListRequest{}, &out); err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, pr := range out.Profiles {
			n = append(n, pr.Name)
		}
		return n
	}
	if got := names(a); !slices.Equal(got, []string{"mine", "shared"}) {
		t.Fatalf("A's profiles %q", got)
	}
	if got := names(b); !slices.Equal(got, []string{"shared"}) {
		t.Fatalf("B's profiles %q", got)
	}
	if err := e.as(t, b, "profiles.get", model.ChatProfileRef{Name: "mine"}, nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("B's get of A's profile: %v", err)
	}
	if err := e.as(t, b, "send", model.ChatSendRequest{Profile: "mine", Message: "hi"}, nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("B's send with A's profile: %v", err)
	}
	if err := e.as(t, a, "profiles.put", model.ChatProfilePutRequest{Profile: model.Profile{Name: "x", Provider: model.ChatProviderOpenAI, Model: "m"}}, nil); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("a non-admin's profile put: %v", err)
	}
	if err := e.as(t, a, "profiles.delete", model.ChatProfileRef{Name: "mine"}, nil); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("a non-admin's profile delete: %v", err)
	}
}

// TestSendDuringDelete: the owner's sends racing the delete of their
// conversation are either refused (CONFLICT, or NOT_FOUND once the id is
// free... then a new conversation of theirs) or taken before it: no log is
// ever left without an owner. Before, a send between the log's deletion
// and the owner's began a new log the delete then left ownerless: only
// admins could reach it, nobody could claim the id, and its charge was
// never given back.
func TestSendDuringDelete(t *testing.T) {
	e := newEnv(t)
	s, _ := e.startServiceOpts(t, 0, Options{PrincipalQuotaMiB: 16})
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	a := principal.Key("a", false, model.ToolFilter{})
	e.llm.Always(llmtest.Text("answer"))
	for i := range 6 {
		conv := fmt.Sprintf("c-%d", i)
		f := e.follow(t, conv)
		if err := e.as(t, a, "send", model.ChatSendRequest{Conversation: conv, Profile: "p", Message: "hi"}, nil); err != nil {
			t.Fatal(err)
		}
		f.done(t, 1, 20*time.Second)
		ctx, stop := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { // the owner sends again and again while the delete runs
			for ctx.Err() == nil {
				err := e.as(t, a, "send", model.ChatSendRequest{Conversation: conv, Profile: "p", Message: "again"}, nil)
				if c := apierr.Of(err); err != nil && c != apierr.Conflict && c != apierr.NotFound {
					t.Errorf("%s: a send during the delete: %v", conv, err)
				}
			}
		})
		testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
			err := e.as(t, a, "delete", model.ChatConversationRef{Conversation: conv}, nil)
			return err == nil, fmt.Sprintf("the delete: %v", err)
		})
		stop()
		wg.Wait()
		// A turn the last send began may still run: wait for the log to
		// settle, then it must be the owner's (or gone).
		testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
			_, err := s.convs.Read(t.Context(), conv)
			if apierr.Of(err) == apierr.NotFound {
				return true, ""
			}
			_, found, oerr := s.ownerOf(t.Context(), conv)
			return err == nil && oerr == nil && found, fmt.Sprintf("%s: its log (%v) has no owner (%v)", conv, err, oerr)
		})
	}
}
