package lostreplies_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/lostreplies"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestOnlyCallsAcrossADropEnd: after a drop, the calls in flight across it
// whose events are found end with ErrLost; a call tied after the drop, a
// call whose event names another server, and a call without an event go
// on.
func TestOnlyCallsAcrossADropEnd(t *testing.T) {
	ns := testkit.NATS(t)
	admin := testkit.Connect(t, ns)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.StreamEvents, Subjects: []string{"mcp.v1.events.>"}}); err != nil {
		t.Fatal(err)
	}
	cut := testkit.NewCut(t, ns.ClientURL())
	nc, err := nats.Connect(cut.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := lostreplies.New(nc, "mcp.v1", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)

	across, release := w.Tie(ctx, "alpha", "echo", "across")
	defer release()
	other, release := w.Tie(ctx, "alpha", "echo", "other-server")
	defer release()
	pending, release := w.Tie(ctx, "alpha", "echo", "pending")
	defer release()
	if none, release := w.Tie(ctx, "alpha", "echo", ""); none != ctx {
		t.Fatal("a call without a request id was tied")
	} else {
		release()
	}

	back := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(back)
	cut.Down()
	for nc.IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	publish := func(server, id string) {
		data, _ := json.Marshal(model.CallEvent{Server: server, Tool: "echo", RequestID: id, Outcome: "ok", At: time.Now()})
		msg := &nats.Msg{Subject: "mcp.v1.events.call." + server, Data: data, Header: nats.Header{bus.HeaderRequestID: {id}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	publish("alpha", "across")     // its reply went out while the connection was down
	publish("beta", "other-server") // the same id, another server's call
	cut.Up()
	select {
	case <-back:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnection")
	}
	after, release := w.Tie(ctx, "alpha", "echo", "after")
	defer release()
	publish("alpha", "after")

	select {
	case <-across.Done():
		err := context.Cause(across)
		if !errors.Is(err, lostreplies.ErrLost) || apierr.Of(err) != apierr.Network {
			t.Fatalf("ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call across the drop whose event is stored did not end")
	}
	time.Sleep(1500 * time.Millisecond) // the reading goes on while "pending" is at risk
	for name, c := range map[string]context.Context{"other-server": other, "pending": pending, "after": after} {
		if c.Err() != nil {
			t.Errorf("%s ended: %v", name, context.Cause(c))
		}
	}
}
