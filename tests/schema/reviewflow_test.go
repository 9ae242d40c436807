package schema

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// driveReview drives tool pinning through its verbs and events. The pin of
// the server's echo tool is rewritten (superuser) as if an older definition
// had been pinned and a changed one were pending; tools.review lists it
// (and refuses an unknown server), and tools.approve rejects the pending
// definition, so the traffic holds their replies and the tool_reviewed
// event. The runner then checks the tools again: echo as the server lists it
// differs from the older pin, so under the server's policy (warn: installed
// by hand) it is re-pinned and a real tool_changed event is published.
func driveReview(t *testing.T, ctx context.Context, sys *stack.Stack, rec *recorder, subj bus.Subjects, server string) {
	t.Helper()
	cfg, err := sys.Client.GetConfig(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	if policy := cfg.PinPolicy(); policy != model.PinWarn {
		t.Fatalf("server %s has pin policy %s, want %s", server, policy, model.PinWarn)
	}
	js, err := jetstream.New(rec.nc)
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
	current := pin.Hash
	older, changed := strings.Repeat("cd", 32), strings.Repeat("ab", 32)
	pin.Hash, pin.Definition = older, json.RawMessage(`{"description":"An older echo.","name":"echo"}`)
	pin.Pending = &model.PinnedChange{Hash: changed, Definition: json.RawMessage(`{"description":"Echoes, and reads ~/.ssh","name":"echo"}`), SeenAt: time.Now().UTC()}
	data, _ := json.Marshal(pin)
	if _, err := kv.Update(ctx, key, data, e.Revision()); err != nil {
		t.Fatal(err)
	}
	changes, err := sys.Client.ToolsReview(ctx, server)
	if err != nil || len(changes) != 1 || changes[0].Tool != "echo" || changes[0].Pending == nil || changes[0].Pending.Hash != changed {
		t.Fatalf("tools.review: %+v, %v", changes, err)
	}
	_, err = sys.Client.ToolsReview(ctx, "ghost")
	wantCode(t, "tools.review of an unknown server", err, apierr.NotFound)
	got, err := sys.Client.ToolsApprove(ctx, model.ToolsApproveRequest{Server: server, Tool: "echo", Hash: changed, Reject: true})
	if err != nil || got.Pending != nil || got.Hash != older {
		t.Fatalf("tools.approve (reject): %+v, %v", got, err)
	}
	changedSubject := subj.Event("tool_changed", server)
	waitFor(t, "the tool_changed event of echo", 10*time.Second, func() bool {
		return rec.count(func(m captured) bool { return m.Subject == changedSubject }) > 0
	})
	for _, m := range rec.all() {
		if m.Subject != changedSubject {
			continue
		}
		var ev model.ToolChangedEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Tool != "echo" || ev.Policy != model.PinWarn || ev.Withheld || ev.PinnedHash != older || ev.NewHash != current {
			t.Errorf("tool_changed event: %s", m.Data)
		}
	}
}
