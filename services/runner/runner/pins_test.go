package runner_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// pinEnv runs one server of the test server under policy and follows its
// tool_changed events.
func pinEnv(t *testing.T, policy string) (*runnertest.Env, chan model.ToolChangedEvent) {
	t.Helper()
	e := runnertest.Start(t, quickOpts())
	events := make(chan model.ToolChangedEvent, 8)
	sub, err := e.NC.Subscribe("mcp.v1.events.tool_changed.alpha", func(m *nats.Msg) {
		var ev model.ToolChangedEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			events <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.Eager = true
	cfg.Pin = policy
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	return e, events
}

// rugPull makes the test server replace its echo tool (another description,
// another behaviour) and announce it with notifications/tools/list_changed.
func rugPull(t *testing.T, e *runnertest.Env) {
	t.Helper()
	if _, err := call(t, e, "alpha", "add_tool", `{"message":"echo"}`); err != nil {
		t.Fatal(err)
	}
}

func echoListed(t *testing.T, e *runnertest.Env) (model.Tool, bool) {
	t.Helper()
	tools, err := e.Client.ListTools(context.Background(), "alpha")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tools, func(x model.Tool) bool { return x.Tool == "echo" })
	if i < 0 {
		return model.Tool{}, false
	}
	return tools[i], true
}

func waitEcho(t *testing.T, e *runnertest.Env, cond func(model.Tool, bool) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if cond(echoListed(t, e)) {
			return
		}
		if time.Now().After(deadline) {
			tool, ok := echoListed(t, e)
			t.Fatalf("%s: echo listed %v: %+v", what, ok, tool)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nextEvent(t *testing.T, events chan model.ToolChangedEvent) model.ToolChangedEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no tool_changed event")
		return model.ToolChangedEvent{}
	}
}

// Strict: a tool whose definition changes (a rug pull through list_changed)
// is withheld from the catalog and rpc tools/list, its calls get an isError
// result, the change is announced and listed for review; approving the
// pending hash brings the new definition in, a stale hash is refused.
func TestPinStrictWithholdsUntilApproved(t *testing.T) {
	e, events := pinEnv(t, model.PinStrict)
	waitEcho(t, e, func(_ model.Tool, ok bool) bool { return ok }, "before")
	rugPull(t, e)
	waitEcho(t, e, func(_ model.Tool, ok bool) bool { return !ok }, "after the change")
	ev := nextEvent(t, events)
	if ev.Tool != "echo" || !ev.Withheld || ev.Policy != model.PinStrict || !slices.Contains(ev.Changed, "description") || ev.PinnedHash == ev.NewHash {
		t.Fatalf("event: %+v", ev)
	}
	res, err := call(t, e, "alpha", "echo", `{"message":"hi"}`)
	if err != nil {
		t.Fatal(err)
	}
	var r callResult
	if err := json.Unmarshal(res, &r); err != nil || !r.IsError || len(r.Content) == 0 || !strings.Contains(r.Content[0].Text, "changed since it was reviewed") {
		t.Fatalf("a call to a withheld tool: %s", res)
	}
	var raw json.RawMessage
	if err := e.Client.RPC(context.Background(), "alpha", "tools/list", nil, &raw); err != nil || strings.Contains(string(raw), `"name":"echo"`) || !strings.Contains(string(raw), `"name":"sleep"`) {
		t.Fatalf("rpc tools/list shows the withheld tool: %s %v", raw, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var review model.ToolsReviewReply
	if err := bus.RequestJSON(ctx, e.NC, "mcp.v1.tools.review", model.ToolsReviewRequest{Server: "alpha"}, &review, 0); err != nil {
		t.Fatal(err)
	}
	if len(review.Changes) != 1 || review.Changes[0].Tool != "echo" || review.Changes[0].Pending == nil || review.Changes[0].Pending.Hash != ev.NewHash {
		t.Fatalf("review: %+v", review)
	}
	reviewed, err := e.NC.SubscribeSync("mcp.v1.events.tool_reviewed.alpha")
	if err != nil {
		t.Fatal(err)
	}
	var out model.ToolPin
	err = bus.RequestJSON(ctx, e.NC, "mcp.v1.tools.approve", model.ToolsApproveRequest{Server: "alpha", Tool: "echo", Hash: ev.PinnedHash}, &out, 0)
	if ae := apierr.From(err); err == nil || ae.Code != apierr.Conflict || ae.Field != "hash" {
		t.Fatalf("approving another hash: %v", err)
	}
	if err := bus.RequestJSON(ctx, e.NC, "mcp.v1.tools.approve", model.ToolsApproveRequest{Server: "alpha", Tool: "echo", Hash: ev.NewHash}, &out, 0); err != nil {
		t.Fatal(err)
	}
	// The review is announced once (the refused one is not): who, and both hashes.
	m, err := reviewed.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal("no tool_reviewed event")
	}
	var rev model.ToolReviewedEvent
	if err := json.Unmarshal(m.Data, &rev); err != nil || rev.Tool != "echo" || rev.Decision != model.PinApproved ||
		rev.Principal != "operator" || rev.PinnedHash != ev.PinnedHash || rev.NewHash != ev.NewHash {
		t.Fatalf("tool_reviewed event %s (%v)", m.Data, err)
	}
	if m, err := reviewed.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a second tool_reviewed event: %s", m.Data)
	}
	waitEcho(t, e, func(tool model.Tool, ok bool) bool { return ok && tool.Description == "added at run time" }, "after the approval")
	if res, err := call(t, e, "alpha", "echo", `{}`); err != nil || text(t, res) != "added tool" {
		t.Fatalf("the approved tool: %s %v", res, err)
	}
	review = model.ToolsReviewReply{}
	if err := bus.RequestJSON(ctx, e.NC, "mcp.v1.tools.review", model.ToolsReviewRequest{}, &review, 0); err != nil || len(review.Changes) != 0 {
		t.Fatalf("review after the approval: %+v %v", review, err)
	}
}

// Warn: the changed tool goes through with its new definition, re-pinned,
// and the change is announced.
func TestPinWarnAnnounces(t *testing.T) {
	e, events := pinEnv(t, model.PinWarn)
	rugPull(t, e)
	waitEcho(t, e, func(tool model.Tool, ok bool) bool { return ok && tool.Description == "added at run time" }, "after the change")
	if ev := nextEvent(t, events); ev.Withheld || ev.Policy != model.PinWarn {
		t.Fatalf("event: %+v", ev)
	}
}

// Off: nothing is pinned, nothing announced.
func TestPinOff(t *testing.T) {
	e, events := pinEnv(t, model.PinOff)
	rugPull(t, e)
	waitEcho(t, e, func(tool model.Tool, ok bool) bool { return ok && tool.Description == "added at run time" }, "after the change")
	keys, err := e.Assets.Pins.ListKeys(context.Background())
	if err == nil {
		for k := range keys.Keys() {
			t.Errorf("pinned under off: %s", k)
		}
	}
	select {
	case ev := <-events:
		t.Fatalf("an event under off: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// Strict: a tool that appears once the server's tools were pinned (added
// or renamed, announced with list_changed) has no pin and is withheld like
// a change, listed for review with no pinned definition; approving pins it.
func TestPinStrictWithholdsANewTool(t *testing.T) {
	e, events := pinEnv(t, model.PinStrict)
	waitEcho(t, e, func(_ model.Tool, ok bool) bool { return ok }, "before")
	if _, err := call(t, e, "alpha", "add_tool", `{"message":"injected"}`); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, events)
	if ev.Tool != "injected" || !ev.Withheld || ev.PinnedHash != "" || !slices.Contains(ev.Changed, "description") {
		t.Fatalf("event: %+v", ev)
	}
	// The event goes out while the runner checks the list; the tool is
	// withheld once the check is done.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := call(t, e, "alpha", "injected", `{}`)
		if err == nil && strings.Contains(string(res), "withheld") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a call of the new tool: %s %v", res, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tools, err := e.Client.ListTools(context.Background(), "alpha")
	if err != nil || slices.ContainsFunc(tools, func(x model.Tool) bool { return x.Tool == "injected" }) {
		t.Fatalf("the new tool is listed before its review (%v)", err)
	}
	var out model.ToolPin
	if err := bus.RequestJSON(context.Background(), e.NC, "mcp.v1.tools.approve", model.ToolsApproveRequest{Server: "alpha", Tool: "injected", Hash: ev.NewHash}, &out, 0); err != nil || out.Hash != ev.NewHash {
		t.Fatalf("approve: %+v %v", out, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		tools, err := e.Client.ListTools(context.Background(), "alpha")
		if err == nil && slices.ContainsFunc(tools, func(x model.Tool) bool { return x.Tool == "injected" }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approved tool is not listed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
