package gateway

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestRevokedKeyChatTurnEnds: revoking a key cancels the chat turn it
// started over REST, as it cancels its tasks and its /v1 completions: the
// tool call running then is stopped, and the turn makes no further tool
// call (nor asks the model again) in the revoked key's name.
func TestRevokedKeyChatTurnEnds(t *testing.T) {
	c := startChat(t)
	c.putProfile(t, "helper", nil)
	leaver := c.createKey(t, model.KeyCreateRequest{Name: "leaver", Scopes: []string{model.KeyScopeChat}})
	base := c.url + "/api/v1/chat"
	conv := uuid.NewString()
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__sleep", `{"ms":30000}`)),
		llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"after the revocation"}`)), llmtest.Text("done"))
	if r := httpDo(t, "POST", base+"/conversations", leaver.Key, model.ChatSendRequest{Conversation: conv, Profile: "helper", Message: "sleep, then echo"}); r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	// The admin follows it (its stream is not the revoked key's).
	events := openSSE(t, base+"/conversations/"+conv+"/events?replay=true", c.admin)
	events.until(t, time.Minute, func(ev model.ChatEvent) bool {
		return ev.ToolCall != nil && ev.ToolCall.Tool == "tm__sleep" && ev.ToolCall.State == model.ToolCallStarted
	})
	asked := c.llm.Attempts()
	if r := httpDo(t, "DELETE", c.url+"/api/v1/keys/"+leaver.ID, c.admin, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	revoked := time.Now()
	evs := events.until(t, time.Minute, isDone)
	done := evs[len(evs)-1].Done
	if done.Reason != model.TurnCancelled || time.Since(revoked) > 15*time.Second {
		t.Fatalf("the revoked key's turn ended %+v after %s, want cancelled at once; tool calls %v",
			done, time.Since(revoked).Round(time.Millisecond), toolStates(evs))
	}
	if slices.ContainsFunc(toolStates(evs), func(s string) bool { return s == "tm__echo:"+model.ToolCallStarted }) || c.llm.Attempts() != asked {
		t.Fatalf("the turn went on after the revocation: tool calls %v, model asked %d times more", toolStates(evs), c.llm.Attempts()-asked)
	}
}
