package runner_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// nextNotice waits for a message on sub and decodes it.
func nextNotice[T any](t *testing.T, sub *nats.Subscription, what string) T {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no %s event: %v", what, err)
	}
	var ev T
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatalf("%s event %s: %v", what, m.Data, err)
	}
	return ev
}

// A server's own prompts/list_changed becomes an events.list_changed event.
func TestServerListChangedEvent(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	sub, err := e.NC.SubscribeSync(bus.NewSubjects("").EventsOf("list_changed"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, e, "alpha", "add_prompt", `{"message":"late"}`); err != nil {
		t.Fatal(err)
	}
	ev := nextNotice[model.ListChangedEvent](t, sub, "list_changed")
	if ev.Server != "alpha" || ev.List != model.ListPrompts {
		t.Fatalf("event %+v, want alpha's prompts", ev)
	}
}

// A resource subscribed through rpc resources/subscribe: the server's
// updates of it are events (coalesced to one a second), those of other
// resources are not; an agent may not subscribe.
func TestResourceUpdatedEvents(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	sub, err := e.NC.SubscribeSync(bus.NewSubjects("").EventsOf("resource_updated"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Client.RPC(ctx, "alpha", "resources/subscribe", map[string]any{"uri": "test://greeting"}, nil); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	err = e.Client.RPC(ctx, "alpha", "resources/subscribe", map[string]any{}, nil)
	if apierr.Of(err) != apierr.Validation {
		t.Fatalf("resources/subscribe without a uri: %v, want VALIDATION_ERROR", err)
	}
	if _, err := call(t, e, "alpha", "touch_resource", `{"message":"test://other"}`); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := call(t, e, "alpha", "touch_resource", `{"message":"test://greeting"}`); err != nil {
			t.Fatal(err)
		}
	}
	ev := nextNotice[model.ResourceUpdatedEvent](t, sub, "resource_updated")
	if ev.Server != "alpha" || ev.URI != "test://greeting" {
		t.Fatalf("event %+v, want alpha's test://greeting", ev)
	}
	// Five updates in a burst: the first at once, the rest as one more a
	// second later, and none of test://other.
	ev = nextNotice[model.ResourceUpdatedEvent](t, sub, "resource_updated (the burst's last)")
	if ev.URI != "test://greeting" {
		t.Fatalf("event %+v, want test://greeting", ev)
	}
	if m, err := sub.NextMsg(1500 * time.Millisecond); err == nil {
		t.Fatalf("a third event %s for a burst of five updates and one unsubscribed", m.Data)
	}
}

// A server with a live lease of a resource subscription does not go idle,
// whatever its idle timeout: the renewals, a minute apart, were its only
// use, so a server idle after less went idle between them and its clients
// heard of no update until the next renewal started it again.
func TestSubscribedServerDoesNotGoIdle(t *testing.T) {
	e := runnertest.Start(t, lifecycleOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.IdleTimeout = model.Duration(300 * time.Millisecond)
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Started again by the subscribe if it went idle meanwhile.
	if err := e.Client.RPC(ctx, "alpha", "resources/subscribe", map[string]any{"uri": "test://greeting"}, nil); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if st := e.Status("alpha"); st.State != model.StateRunning {
			t.Fatalf("a subscribed server went %s (idle timeout 300ms)", st.State)
		}
	}
	sub, err := e.NC.SubscribeSync(bus.NewSubjects("").EventsOf("resource_updated"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, e, "alpha", "touch_resource", `{"message":"test://greeting"}`); err != nil {
		t.Fatal(err)
	}
	if ev := nextNotice[model.ResourceUpdatedEvent](t, sub, "resource_updated"); ev.URI != "test://greeting" {
		t.Fatalf("event %+v", ev)
	}
}
