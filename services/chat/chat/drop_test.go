package chat

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestToolReplyLostAcrossADrop: a tool call whose reply comes while the
// chat service's NATS connection is down ends once the connection is back,
// and the model reads that the tool ran and its reply was lost, instead of
// the turn waiting out the call's timeout.
func TestToolReplyLostAcrossADrop(t *testing.T) {
	e := newEnv(t)
	cut := testkit.NewCut(t, e.rt.NS.ClientURL())
	nc, err := nats.Connect(cut.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e.startServiceOn(t, nc, 10*time.Second, Options{})
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__sleep", `{"ms":800}`)), llmtest.Text("noted"))
	f := e.follow(t, "dropped")
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "dropped", Profile: "p", Message: "rest"}, &model.ChatSendReply{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return len(f.toolStates()) > 0, "the tool call has not started"
	})
	cut.Down()
	time.Sleep(1500 * time.Millisecond) // the call's reply is published meanwhile
	cut.Up()
	// The call's timeout is 10 s: the turn ends well before it would.
	if d := f.done(t, 1, 6*time.Second); d.Reason != model.TurnFinal || d.Message != "noted" {
		t.Fatalf("done = %+v", d)
	}
	if body := string(e.llm.Last().Body); !strings.Contains(body, "reply was lost") {
		t.Errorf("the model did not read that the reply was lost: %s", body)
	}
}
