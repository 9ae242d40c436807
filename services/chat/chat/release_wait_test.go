package chat

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// TestSendOnDoneWaitsForTheRelease: a turn's driver writes the turn's end
// (the done clients see) and only then gives its lease up, so a send made
// on that done event could find the lease still held and was refused
// CONFLICT (the CLI's next prompt under load). A send now waits a moment
// for the lease of a turn whose end is in the log; a lease of a turn that
// has not ended is still CONFLICT at once.
func TestSendOnDoneWaitsForTheRelease(t *testing.T) {
	e := newEnv(t)
	s, _ := e.startService(t, 0)
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	e.llm.Enqueue(llmtest.Text("one"), llmtest.Text("two"))
	f := e.follow(t, "rw")
	var first model.ChatSendReply
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "rw", Profile: "p", Message: "go"}, &first); err != nil {
		t.Fatal(err)
	}
	f.done(t, 1, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hold := func(turn string) uint64 {
		t.Helper()
		val, _ := json.Marshal(leaseValue{Instance: "elsewhere", Turn: turn, Since: time.Now().UTC()})
		var rev uint64
		var err error
		// The driver's own release may still be on its way.
		for i := 0; i < 50; i++ {
			if rev, err = s.turns.Create(ctx, leaseKey("rw"), val); err == nil {
				return rev
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("holding the lease: %v", err)
		return 0
	}

	// The window: the ended turn's lease is still held, released 300 ms on.
	rev := hold(first.Turn)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = s.turns.Delete(context.Background(), leaseKey("rw"), jetstream.LastRevision(rev))
	}()
	began := time.Now()
	var second model.ChatSendReply
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "rw", Message: "again"}, &second); err != nil {
		t.Fatalf("a send on done, the lease released %v later: %v (want the turn begun)", 300*time.Millisecond, err)
	}
	t.Logf("the send waited %v", time.Since(began).Round(time.Millisecond))
	if d := f.done(t, 2, 20*time.Second); d.Message != "two" {
		t.Fatalf("second turn's done: %+v", d)
	}

	// A turn that has not ended holds the conversation: CONFLICT at once.
	rev = hold("not-ended")
	began = time.Now()
	err := e.req(t, "send", model.ChatSendRequest{Conversation: "rw", Message: "third"}, nil)
	if apierr.Of(err) != apierr.Conflict || time.Since(began) > time.Second {
		t.Fatalf("a send while a turn runs: %v after %v, want CONFLICT at once", err, time.Since(began))
	}
	_ = s.turns.Delete(ctx, leaseKey("rw"), jetstream.LastRevision(rev))

	// An ended turn's lease never released (its driver died just after
	// writing the end): CONFLICT once the wait is over, not a hang.
	hold(second.Turn)
	began = time.Now()
	err = e.req(t, "send", model.ChatSendRequest{Conversation: "rw", Message: "fourth"}, nil)
	if apierr.Of(err) != apierr.Conflict || time.Since(began) < releaseWait || time.Since(began) > releaseWait+3*time.Second {
		t.Fatalf("a send while an ended turn's lease stays: %v after %v, want CONFLICT after %v", err, time.Since(began), releaseWait)
	}
}
