package lostreplies_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
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
// whose events are found and that still wait end with ErrLost; a call tied
// after the drop, a call whose reply comes after its event was read, and
// calls whose event is another server's, another principal's or an
// agent's, or that have none, go on. A second drop while the first is
// still read ends its calls too.
func TestOnlyCallsAcrossADropEnd(t *testing.T) {
	ns := testkit.NATS(t)
	admin := testkit.Connect(t, ns)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
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

	tie := func(id string) (context.Context, context.CancelFunc) {
		c, release := w.Tie(ctx, "alpha", "echo", id)
		t.Cleanup(release)
		return c, release
	}
	across, _ := tie("across")
	other, _ := tie("other-server")
	agent, _ := tie("agent")
	someone, _ := tie("someone-else")
	pending, _ := tie("pending")
	notRun, _ := tie("not-run")
	oldTry, _ := tie("old-try")
	replied, reply := tie("replied")
	if none, release := w.Tie(ctx, "alpha", "echo", ""); none != ctx {
		t.Fatal("a call without a request id was tied")
	} else {
		release()
	}
	publish := func(ev model.CallEvent) {
		ev.Tool, ev.Outcome = "echo", "ok"
		if ev.At.IsZero() {
			ev.At = time.Now()
		}
		data, _ := json.Marshal(ev)
		msg := &nats.Msg{Subject: "mcp.v1.events.call." + ev.Server, Data: data, Header: nats.Header{bus.HeaderRequestID: {ev.RequestID}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	cycle := func(meanwhile func()) {
		t.Helper()
		back := nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(back)
		cut.Down()
		for nc.IsConnected() {
			time.Sleep(10 * time.Millisecond)
		}
		meanwhile()
		cut.Up()
		select {
		case <-back:
		case <-time.After(10 * time.Second):
			t.Fatal("no reconnection")
		}
	}
	cycle(func() {
		// Their replies went out while the connection was down.
		publish(model.CallEvent{Server: "alpha", RequestID: "across"})
		publish(model.CallEvent{Server: "beta", RequestID: "other-server"})
		publish(model.CallEvent{Server: "alpha", RequestID: "agent", Caller: "agent:x"})
		publish(model.CallEvent{Server: "alpha", RequestID: "someone-else", Principal: "key:someone"})
		// A try refused unrun, sent again under the same id; an older try.
		publish(model.CallEvent{Server: "alpha", RequestID: "not-run", NotRun: true})
		publish(model.CallEvent{Server: "alpha", RequestID: "old-try", At: time.Now().Add(-time.Minute)})
	})
	after, _ := tie("after")
	publish(model.CallEvent{Server: "alpha", RequestID: "after"})
	// Its reply was published just after the reconnection: the event is
	// read, but the reply comes within the grace.
	publish(model.CallEvent{Server: "alpha", RequestID: "replied"})
	time.Sleep(100 * time.Millisecond)
	reply()

	lost := func(name string, c context.Context) {
		t.Helper()
		select {
		case <-c.Done():
			err := context.Cause(c)
			if !errors.Is(err, lostreplies.ErrLost) || apierr.Of(err) != apierr.Network || !strings.Contains(err.Error(), "alpha__echo") {
				t.Fatalf("%s ended with %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s, across a drop and whose event is stored, did not end", name)
		}
	}
	lost("across", across)
	if err := context.Cause(replied); !errors.Is(err, context.Canceled) {
		t.Errorf("the call whose reply came was ended with %v", err)
	}

	// A second drop while "pending" keeps the first reading on.
	second, _ := tie("second")
	cycle(func() { publish(model.CallEvent{Server: "alpha", RequestID: "second"}) })
	lost("second", second)

	time.Sleep(time.Second)
	for name, c := range map[string]context.Context{"other-server": other, "agent": agent, "someone-else": someone, "pending": pending, "after": after,
		"not-run": notRun, "old-try": oldTry} {
		if c.Err() != nil {
			t.Errorf("%s ended: %v", name, context.Cause(c))
		}
	}
}
