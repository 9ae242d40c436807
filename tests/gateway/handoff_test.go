package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// A gateway sharing the runner's process (MayPublish set, as `mcpbus up`
// builds it) hands calls to the runner without NATS; one without goes over
// the bus. Both give the same replies and the same call events, and once
// the runner no longer serves the server the hand-off gives way to the bus.
//
// Not parallel: it counts hand-offs with bus.LocalRequests, a count of the
// whole process, which other tests' stacks would move.
func TestInProcessHandOff(t *testing.T) {
	e := start(t) // its gateway: every call over NATS
	local := handOffGateway(t, e, "test-gateway-local", "hand")

	events, err := e.st.Conn.SubscribeSync(bus.NewSubjects("").Event("call", "hand"))
	if err != nil {
		t.Fatal(err)
	}
	nextEvent := func() model.CallEvent { return nextCallEvent(t, events) }
	invoke := func(g *env, tool, params string) (int, rest.InvokeReply) {
		r := g.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: tool, Params: json.RawMessage(params)})
		var out rest.InvokeReply
		r.decode(t, &out)
		return r.status, out
	}
	for _, c := range []struct{ tool, params string }{
		{"hand__echo", `{"message":"hi"}`},
		{"hand__fail", `{"message":"on purpose"}`}, // a tool error
	} {
		before := bus.LocalRequests()
		busStatus, viaBus := invoke(e, c.tool, c.params)
		busEvent := nextEvent()
		if bus.LocalRequests() != before {
			t.Fatalf("%s: the bus gateway's call was handed over in process", c.tool)
		}
		localStatus, viaLocal := invoke(local, c.tool, c.params)
		localEvent := nextEvent()
		if bus.LocalRequests() != before+1 {
			t.Fatalf("%s: the local gateway's call went over NATS", c.tool)
		}
		a, _ := json.Marshal(viaBus)
		b, _ := json.Marshal(viaLocal)
		if busStatus != localStatus || string(a) != string(b) {
			t.Fatalf("%s: bus %d %s, local %d %s", c.tool, busStatus, a, localStatus, b)
		}
		same := func(ev model.CallEvent) model.CallEvent {
			ev.RequestID, ev.TraceID, ev.DurationMS, ev.At = "", "", 0, time.Time{}
			return ev
		}
		if x, y := same(busEvent), same(localEvent); !equalJSON(t, x, y) {
			t.Fatalf("%s: events differ: bus %+v, local %+v", c.tool, busEvent, localEvent)
		}
		if busEvent.Principal == "" || busEvent.Outcome == "" {
			t.Fatalf("%s: the event names no principal or outcome: %+v", c.tool, busEvent)
		}
	}

	// The runner stops serving the server: the local gateway's call goes to
	// the bus and gets what the other gateway gets.
	if r := e.do("POST", "/api/v1/servers/hand/disable", nil); r.status != http.StatusOK {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(15 * time.Second)
	for bus.HasLocal(e.st.Conn, bus.NewSubjects("").Call("hand", "echo")) {
		if time.Now().After(deadline) {
			t.Fatal("the stopped server's calls are still handed over in process")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Each gateway's catalog drops the tool when its own watch sees the
	// stop: the answers agree once both have (503 before, 404 after).
	before := bus.LocalRequests()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		busStatus, viaBus := invoke(e, "hand__echo", `{"message":"hi"}`)
		localStatus, viaLocal := invoke(local, "hand__echo", `{"message":"hi"}`)
		if bus.LocalRequests() != before || viaBus.Success || viaLocal.Success {
			t.Fatalf("after the stop: bus %d %+v, local %d %+v (handed over %d)", busStatus, viaBus, localStatus, viaLocal, bus.LocalRequests()-before)
		}
		if busStatus == localStatus && viaBus.ErrorType == viaLocal.ErrorType {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stop the gateways disagree: bus %d %+v, local %d %+v", busStatus, viaBus, localStatus, viaLocal)
		}
	}
}

// handOffGateway runs, beside e's gateway, one named name that hands calls
// to the runner in process (MayPublish set, as `mcpbus up` builds it; the
// same admin key, so the same principal), starts the test server named
// server, and waits until both gateways list its tools.
func handOffGateway(t *testing.T, e *env, name, server string) *env {
	t.Helper()
	perms, err := access.For(access.Gateway, bus.NewSubjects("").Prefix, "_I."+name)
	if err != nil {
		t.Fatal(err)
	}
	local := runGateway(t, e.st, name, e.dir, e.logs, gateway.Options{MayPublish: perms.MayPublish})
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: testServerConfig(server)}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/api/v1/servers/"+server+"/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	e.waitState(server, model.StateRunning)
	for _, g := range []*env{e, local} {
		waitTools(t, g, func(names []string) bool {
			return contains(names, server+"__echo") && contains(names, server+"__sleep")
		})
	}
	return local
}

// nextCallEvent is the next call event on events, within 10 s.
func nextCallEvent(t *testing.T, events *nats.Subscription) model.CallEvent {
	t.Helper()
	m, err := events.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no call event within 10 s: %v", err)
	}
	var ev model.CallEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func equalJSON(t *testing.T, x, y any) bool {
	t.Helper()
	a, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(y)
	if err != nil {
		t.Fatal(err)
	}
	return string(a) == string(b)
}

// A call handed over in process runs on its requester's goroutine (the
// runner's async): when the requester gives up, here a client that hangs up,
// the call still ends at once, cancelled at the server, as a bus caller's
// cancel message ends it, and the runner serves the next call.
func TestInProcessCallEndsWithItsRequester(t *testing.T) {
	t.Parallel()
	e := start(t)
	local := handOffGateway(t, e, "test-gateway-giveup", "giveup")
	events, err := e.st.Conn.SubscribeSync(bus.NewSubjects("").Event("call", "giveup"))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	body, _ := json.Marshal(rest.InvokeRequest{ToolName: "giveup__sleep", Params: json.RawMessage(`{"ms":60000}`)})
	req, err := http.NewRequestWithContext(ctx, "POST", local.url+"/mcp/invoke", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.admin)
	req.Header.Set("Content-Type", "application/json")
	before := bus.LocalRequests()
	started := time.Now()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a 60 s sleep answered %d within the client's 300 ms", resp.StatusCode)
	}
	ev := nextCallEvent(t, events) // none: the handed-over call runs on
	if ev.Tool != "sleep" || ev.Outcome != "cancelled" || time.Since(started) > 10*time.Second {
		t.Fatalf("the hung-up call's event: %+v after %s", ev, time.Since(started))
	}
	if bus.LocalRequests() == before {
		t.Fatal("the call went over NATS, not in process")
	}
	r := local.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: "giveup__echo", Params: json.RawMessage(`{"message":"after"}`)})
	var out rest.InvokeReply
	r.decode(t, &out)
	if !out.Success || !strings.Contains(string(out.Result), "after") {
		t.Fatalf("the next call: %d %s", r.status, r.body)
	}
}
