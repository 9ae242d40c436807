package chat

import (
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestCleanStopHandsOverAtOnce: an instance that stops cleanly hands the
// lease of a turn held for approval over, so another instance (a peer, or
// the same one restarted) lists the pending call and resumes the turn at
// once, not after the lease TTL as after a crash.
func TestCleanStopHandsOverAtOnce(t *testing.T) {
	const ttl = 30 * time.Second // a takeover by TTL would come far too late
	const within = 5 * time.Second
	e := newEnv(t)
	a, stopA := e.startService(t, ttl)
	b, stopB := e.startService(t, ttl)
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL(),
		Approval: model.ApprovalPolicy{Default: model.ApprovalAsk}})

	// held sends a turn whose one tool call waits for approval and returns
	// the call's id once it is listed.
	held := func(conv string) string {
		t.Helper()
		e.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__echo", `{"message":"hi"}`)), llmtest.Text("echoed"))
		if err := e.req(t, "send", model.ChatSendRequest{Conversation: conv, Profile: "p", Message: "echo hi"}, &model.ChatSendReply{}); err != nil {
			t.Fatal(err)
		}
		return pendingCall(t, e, conv, 20*time.Second)
	}
	// approve approves the call once another instance lists it, within
	// the bound, and waits for the turn's end.
	approve := func(conv string, f *follow, stopped time.Time) {
		t.Helper()
		id := pendingCall(t, e, conv, within)
		if took := time.Since(stopped); took > within {
			t.Fatalf("%s: the pending call was listed again %s after the stop", conv, took)
		}
		if err := e.req(t, "approve", model.ChatApproveRequest{Conversation: conv, CallID: id, Decision: model.DecisionApprove}, nil); err != nil {
			t.Fatalf("%s: approve: %v", conv, err)
		}
		if d := f.done(t, 1, within); d.Reason != model.TurnFinal || d.Message != "echoed" {
			t.Errorf("%s: done = %+v", conv, d)
		}
	}

	// A peer takes the turn over.
	f := e.follow(t, "peer")
	held("peer")
	stop, survivor := stopB, a
	if a.drives("peer") {
		stop, survivor = stopA, b
	} else if !b.drives("peer") {
		t.Fatal("no instance drives the turn")
	}
	stop()
	approve("peer", f, time.Now())

	// The only instance stops and a new one starts (mcpbus up restarted).
	stopSurvivor := stopA
	if survivor == b {
		stopSurvivor = stopB
	}
	f = e.follow(t, "restart")
	held("restart")
	stopSurvivor()
	stopped := time.Now()
	e.startService(t, ttl)
	approve("restart", f, stopped)
}

// pendingCall waits for conv's one pending call and returns its id.
func pendingCall(t *testing.T, e *env, conv string, within time.Duration) string {
	t.Helper()
	var id string
	testkit.WaitFor(t, within, func() (bool, string) {
		var p model.ChatPendingReply
		if err := e.req(t, "pending", model.ChatPendingRequest{Conversation: conv}, &p); err != nil {
			return false, err.Error()
		}
		if len(p.Calls) != 1 {
			return false, "no call pending"
		}
		id = p.Calls[0].CallID
		return true, ""
	})
	return id
}
