package runner

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// A busy server's status is published every few seconds for its call
// counts alone, which an agent's copy leaves out: each became one message
// per agent granted the server, all alike. Only a change an agent sees
// reaches it.
func TestAgentStatusOnlyOnChange(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	r := &Runner{nc: nc, subj: bus.NewSubjects("mcp.v1"), log: slog.New(slog.DiscardHandler),
		agents: map[string]model.AgentRecord{"a": {Allow: []string{"shop__*"}}}}
	got := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("mcp.v1.agent.a.events.status.shop", got)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	st := model.Status{Server: "shop", State: model.StateRunning, Tools: []string{"echo"}, UpdatedAt: time.Now()}
	for i := range 3 { // counts moved: nothing new for the agent
		st.Calls, st.UpdatedAt = uint64(i), st.UpdatedAt.Add(time.Second)
		r.publishAgentStatus(st)
	}
	st.State = model.StateIdle // a change it sees
	r.publishAgentStatus(st)
	// Delivered in order: count up to the idle one.
	for n := 1; ; n++ {
		select {
		case m := <-got:
			var seen model.Status
			if err := json.Unmarshal(m.Data, &seen); err != nil {
				t.Fatal(err)
			}
			if seen.State != model.StateIdle {
				continue
			}
			if n != 2 {
				t.Fatalf("the agent got %d status events, want 2 (running once, then idle)", n)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("no idle status reached the agent")
		}
	}
}
