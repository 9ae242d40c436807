package approvals

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// lostCreate is a bucket whose Create lands but whose answer is lost as
// the caller's ctx ends: what a JetStream slower than a retry's try bound
// (bus.RetryKV) does when the turn is cancelled meanwhile.
type lostCreate struct{ jetstream.KeyValue }

func (l lostCreate) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if _, err := l.KeyValue.Create(context.WithoutCancel(ctx), key, value, opts...); err != nil {
		return 0, err
	}
	return 0, context.Canceled
}

// A pending key written by a Create whose answer never came is deleted
// before Ask (and AskInput) return: else the conversation lists, for good,
// a call nobody waits for (TestCancel's "still pending" on a loaded host).
func TestLostCreateLeavesNothingPending(t *testing.T) {
	ns := testkit.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Open(ctx, testkit.Connect(t, ns), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a.kv = lostCreate{a.kv}
	c := model.ChatToolCall{CallID: "x", Tool: "fs__write", State: model.ToolCallAwaitingApproval, Arguments: json.RawMessage(`{}`)}
	if _, err := a.Ask(ctx, "conv", c, model.Tool{}, nil); err == nil {
		t.Fatal("Ask succeeded though its pending key's write failed")
	}
	if p, err := a.Pending(ctx, "conv"); err != nil || len(p) != 0 {
		t.Fatalf("pending after a failed Ask: %+v %v", p, err)
	}
	in := model.ChatInput{InputID: "in1", CallID: "x", Tool: "fs__write", Server: "fs", Message: "?",
		RequestedSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
	if _, _, err := a.AskInput(ctx, "conv", in, nil); err == nil {
		t.Fatal("AskInput succeeded though its key's write failed")
	}
	if p, err := a.PendingInputs(ctx, "conv"); err != nil || len(p) != 0 {
		t.Fatalf("inputs pending after a failed AskInput: %+v %v", p, err)
	}
}
