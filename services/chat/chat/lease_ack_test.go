package chat

import (
	"context"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestRenewalAppliedUnansweredKeepsTheTurn: a lease renewal that JetStream
// applied but whose answer was lost (a leader change, the connection's node
// dying, a commit slower than the renewal's wait) leaves this instance's
// lease at a revision its drive does not know. The next renewal must see
// the lease is still its own and go on. Before, it took the revision
// mismatch for a lost lease and stopped the turn, which nobody drove until
// the lease lapsed and a takeover asked the model again.
func TestRenewalAppliedUnansweredKeepsTheTurn(t *testing.T) {
	e := newEnv(t)
	s, _ := e.startService(t, 1500*time.Millisecond)
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.llm.Enqueue(llmtest.Slow(llmtest.Text("first"), 3*time.Second), llmtest.Text("asked again"))
	f := e.follow(t, "ack")
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "ack", Profile: "p", Message: "go"}, &model.ChatSendReply{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { return len(e.llm.Requests()) == 1, "the model is not asked yet" })
	// What the lost answer leaves: the same lease, one revision on.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		en, err := s.turns.Get(ctx, leaseKey("ack"))
		if err != nil {
			return false, err.Error()
		}
		_, err = s.turns.Update(ctx, leaseKey("ack"), en.Value(), en.Revision())
		return err == nil, "rewriting the lease: " + errString(err)
	})
	began := time.Now()
	d := f.done(t, 1, 20*time.Second)
	t.Logf("done %s after the rewrite", time.Since(began).Round(time.Millisecond))
	if d.Message != "first" || len(e.llm.Requests()) != 1 {
		t.Errorf("done = %+v after %d model requests, want the first answer and one request (the turn kept)", d, len(e.llm.Requests()))
	}
}
