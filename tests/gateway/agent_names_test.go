package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// An agent's grant may name a tool as its server does: granted
// tm__files.remove, the agent calls the tool listed as
// tm__files_remove_<hash> on its subject token (the bus permission and the
// runner's check both take it), sees it in its tools.list, and reaches no
// other tool of tm.
func TestAgentGrantByTheServersToolName(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	e := c.mcpEnv
	if _, err := e.st.Client.Call(ctxT(t, 10*time.Second), "tm", "add_tool", json.RawMessage(`{"message":"files.remove"}`), nil); err != nil {
		t.Fatal(err)
	}
	anc := connectAgent(t, e, model.AgentCreateRequest{Name: "dots", Allow: []string{"tm__files.remove"}})
	own := "mcp.v1.agent.dots."
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		reply, err := anc.Request(own+"call.tm."+model.ToolToken("files.remove"), []byte(`{}`), 5*time.Second)
		if err != nil {
			return false, err.Error()
		}
		if e := bus.ReplyError(reply); e != nil {
			return false, e.Error()
		}
		return string(reply.Data) != "", ""
	})
	// The catalog the list answers from follows the server's list_changed
	// a moment after the call could reach the tool.
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		reply, err := anc.Request(own+"tools.list", nil, 10*time.Second)
		if err != nil {
			return false, err.Error()
		}
		var list model.ToolsListReply
		if err := json.Unmarshal(reply.Data, &list); err != nil {
			return false, fmt.Sprintf("tools.list: %s", reply.Data)
		}
		var names []string
		for _, tl := range list.Tools {
			names = append(names, tl.Name)
		}
		return len(list.Tools) == 1 && list.Tools[0].Tool == "files.remove", fmt.Sprintf("the agent lists %v, want the one tool files.remove", names)
	})
	// Another tool of tm: refused by the bus (no permission) or the runner.
	if reply, err := anc.Request(own+"call.tm.echo", []byte(`{"message":"x"}`), 2*time.Second); err == nil && bus.ReplyError(reply) == nil {
		t.Fatalf("the agent called tm.echo: %s", reply.Data)
	} else {
		t.Logf("tm.echo refused: %v", fmt.Sprint(err, bus.ReplyError(reply)))
	}
}

// connectAgent creates an agent over REST and connects as it (its seed and
// its inbox prefix).
func connectAgent(t *testing.T, e *mcpEnv, req model.AgentCreateRequest) *nats.Conn {
	t.Helper()
	r := httpDo(t, http.MethodPost, e.url+"/api/v1/agents", e.admin, req)
	var ag model.Agent
	r.decode(t, &ag)
	if r.status != http.StatusCreated {
		t.Fatalf("creating agent %s: %d %s", req.Name, r.status, r.body)
	}
	seed, err := nats.NkeyOptionFromSeed(ag.SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := e.st.NATS.Connect(seed, nats.CustomInboxPrefix(ag.InboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
