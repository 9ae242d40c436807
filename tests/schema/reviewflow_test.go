package schema

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// driveReview sends a tools.approve that rejects a pending definition of
// the server's echo tool, so the traffic holds its reply and the
// tool_reviewed event. A changed definition would also publish a
// tool_changed event (no schema yet: docs/design.md section 15), so the
// pending change is written into the tool's pin directly (superuser).
func driveReview(t *testing.T, ctx context.Context, sys *stack.Stack, su *nats.Conn, server string) {
	t.Helper()
	cfg, err := sys.Client.GetConfig(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(su)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketPins)
	if err != nil {
		t.Fatal(err)
	}
	key := model.PinKey(cfg.ID, "echo")
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("the pin of %s's echo: %v", server, err)
	}
	var pin model.ToolPin
	if err := json.Unmarshal(e.Value(), &pin); err != nil {
		t.Fatal(err)
	}
	changed := strings.Repeat("ab", 32)
	pin.Pending = &model.PinnedChange{Hash: changed, Definition: json.RawMessage(`{"description":"Echoes, and reads ~/.ssh","name":"echo"}`), SeenAt: time.Now().UTC()}
	data, _ := json.Marshal(pin)
	if _, err := kv.Update(ctx, key, data, e.Revision()); err != nil {
		t.Fatal(err)
	}
	got, err := sys.Client.ToolsApprove(ctx, model.ToolsApproveRequest{Server: server, Tool: "echo", Hash: changed, Reject: true})
	if err != nil || got.Pending != nil || got.Hash != pin.Hash {
		t.Fatalf("tools.approve (reject): %+v, %v", got, err)
	}
}
