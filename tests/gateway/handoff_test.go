package gateway

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

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
	perms, err := access.For(access.Gateway, bus.NewSubjects("").Prefix, "_I.test-gateway-local")
	if err != nil {
		t.Fatal(err)
	}
	local := runGateway(t, e.st, "test-gateway-local", e.dir, e.logs, // the same admin key: the same principal
		gateway.Options{MayPublish: perms.MayPublish})

	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: testServerConfig("hand")}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/api/v1/servers/hand/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	e.waitState("hand", model.StateRunning)
	waitTools(t, e, func(names []string) bool { return contains(names, "hand__echo") })
	waitTools(t, local, func(names []string) bool { return contains(names, "hand__echo") })

	events, err := e.st.Conn.SubscribeSync(bus.NewSubjects("").Event("call", "hand"))
	if err != nil {
		t.Fatal(err)
	}
	nextEvent := func() model.CallEvent {
		t.Helper()
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no call event: %v", err)
		}
		var ev model.CallEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
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
