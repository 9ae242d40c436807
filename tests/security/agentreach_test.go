package security

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestAgentReach: what an agent granted some tools of a server learns and
// takes of it beyond those tools, over its own subjects. A tool the
// operator's filter hides, or one outside its globs, is named to it nowhere
// (not by rpc tools/list, not in the status events it may follow); its rpc
// requests, like its calls, take only its own share of the server.
func TestAgentReach(t *testing.T) {
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := model.McpConfig{Name: "shop", Enabled: true,
		Package: model.Package{Type: model.PackageBinary, Identifier: testServer},
		// Each resources/read takes a second: an rpc in flight for a while.
		EnvVars:   map[string]model.EnvVar{"TESTMCP_READ_MS": {Value: "1000"}},
		Tools:     model.ToolFilter{Deny: []string{"env*"}},
		Transport: model.Transport{Type: model.TransportStdio}, Runtime: model.Runtime{Eager: true}}
	if _, err := st.Client.CreateConfig(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	connect := func(in model.AgentCreateRequest) (*nats.Conn, *violations) {
		t.Helper()
		a, err := st.CreateAgent(in)
		if err != nil {
			t.Fatal(err)
		}
		v := &violations{}
		nc, err := connectSeed(t, st, a.SeedFile, a.InboxPrefix, v)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc, v
	}
	whole, wv := connect(model.AgentCreateRequest{Name: "whole", Allow: []string{"shop__*"}, MaxInflight: 2})
	narrow, nv := connect(model.AgentCreateRequest{Name: "narrow", Allow: []string{"shop__echo"}})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		m, err := narrow.Request("mcp.v1.agent.narrow.call.shop.echo", []byte(`{"message":"up"}`), 10*time.Second)
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shop__echo never answered the agent: %v %v", err, m)
		}
	}
	names := func(t *testing.T, nc *nats.Conn, subject string) []string {
		t.Helper()
		m, err := nc.Request(subject, []byte(`{"method":"tools/list"}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		if err := json.Unmarshal(m.Data, &l); err != nil {
			t.Fatalf("%s: %v", m.Data, err)
		}
		var out []string
		for _, tl := range l.Tools {
			out = append(out, tl.Name)
		}
		return out
	}

	t.Run("rpc tools/list keeps the operator's filter", func(t *testing.T) {
		// The config denies env*: its catalog and its calls know no env,
		// and neither may the server's own tools/list through rpc.
		got := names(t, whole, "mcp.v1.agent.whole.rpc.shop")
		if !slices.Contains(got, "echo") || slices.Contains(got, "env") || slices.Contains(got, "env_sha256") {
			t.Errorf("rpc tools/list of an agent granted shop__* under a filter denying env*: %v", got)
		}
	})

	t.Run("status events name only its own tools", func(t *testing.T) {
		// A server's own status events list every tool of it: not the
		// narrow agent's to read; its copy under its prefix is.
		if sub, err := narrow.Subscribe("mcp.v1.events.status.shop", func(*nats.Msg) {}); err == nil {
			defer func() { _ = sub.Unsubscribe() }()
		}
		if !nv.wait("mcp.v1.events.status.shop") {
			t.Error("the agent granted shop__echo subscribed to mcp.v1.events.status.shop")
		}
		// Nor is its copy another agent's to read.
		if sub, err := whole.Subscribe("mcp.v1.agent.narrow.events.status.shop", func(*nats.Msg) {}); err == nil {
			defer func() { _ = sub.Unsubscribe() }()
		}
		if !wv.wait("mcp.v1.agent.narrow.events.status.shop") {
			t.Error("agent whole subscribed to agent narrow's status events")
		}
		got := make(chan *nats.Msg, 8)
		sub, err := narrow.ChanSubscribe("mcp.v1.agent.narrow.events.status.shop", got)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := narrow.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Client.Runtime(ctx, "restart", "shop"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.After(20 * time.Second); ; {
			select {
			case m := <-got:
				var s model.Status
				if err := json.Unmarshal(m.Data, &s); err != nil {
					t.Fatal(err)
				}
				if s.Calls != 0 || s.Errors != 0 {
					t.Errorf("a status event tells an agent every caller's calls and errors: %s", m.Data)
				}
				for _, name := range s.Tools {
					if name != "echo" {
						t.Fatalf("a status event shows the agent granted shop__echo the tool %s: %s", name, m.Data)
					}
				}
				if s.State == model.StateRunning {
					if len(s.Tools) != 1 {
						t.Errorf("the running status names not its one tool: %s", m.Data)
					}
					return
				}
			case <-deadline:
				t.Fatal("no running status event reached the agent under its own prefix")
			}
		}
	})

	t.Run("a request id and a tool token cannot bloat its event", func(t *testing.T) {
		// The call event, which the audit stream keeps (1 GiB, oldest
		// dropped first), carries the request id: a megabyte each would
		// let an agent push every older record out in a thousand calls.
		msg := nats.NewMsg("mcp.v1.agent.narrow.call.shop.echo")
		msg.Data = []byte(`{"message":"big"}`)
		msg.Header.Set("Mcp-Request-Id", strings.Repeat("r", 1<<20))
		m, err := narrow.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get("Nats-Service-Error-Code") != "400" || !strings.Contains(string(m.Data), `"field":"Mcp-Request-Id"`) {
			t.Errorf("a call with a 1 MiB request id: %v %.200s", m.Header, m.Data)
		}
		msg.Header.Set("Mcp-Request-Id", strings.Repeat("r", bus.MaxRequestID))
		if m, err := narrow.RequestMsg(msg, 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Errorf("a call with a request id of %d bytes: %v %v", bus.MaxRequestID, err, m)
		}
		// So does the tool's subject token, up to the 4 KiB of a subject:
		// one longer than any tool's token (model.MaxTokenLen) names none.
		events := make(chan *nats.Msg, 4)
		sub, err := whole.ChanSubscribe("mcp.v1.agent.whole.events.call.*", events)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := whole.Flush(); err != nil {
			t.Fatal(err)
		}
		m, err = whole.Request("mcp.v1.agent.whole.call.shop."+strings.Repeat("t", 3000), []byte(`{}`), 10*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "404" {
			t.Fatalf("a call of a 3,000-byte tool token: %v %v", err, m)
		}
		select {
		case ev := <-events:
			t.Errorf("a call of a 3,000-byte tool token is an event of %d bytes", len(ev.Data))
		case <-time.After(300 * time.Millisecond):
		}
	})

	t.Run("its requests keep to its rate, refused before they are events", func(t *testing.T) {
		// Each call is an event the audit stream keeps (1 GiB, oldest
		// dropped first): at thousands of calls a second one agent would
		// push months of records out within minutes.
		bursty, _ := connect(model.AgentCreateRequest{Name: "bursty", Allow: []string{"shop__echo"}, Rate: &model.KeyRate{RPS: 0.2, Burst: 3}})
		events := make(chan *nats.Msg, 16)
		sub, err := bursty.ChanSubscribe("mcp.v1.agent.bursty.events.call.*", events)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := bursty.Flush(); err != nil {
			t.Fatal(err)
		}
		var codes []string
		for range 6 {
			m, err := bursty.Request("mcp.v1.agent.bursty.call.shop.echo", []byte(`{"message":"again"}`), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, m.Header.Get("Nats-Service-Error-Code"))
		}
		if !slices.Equal(codes, []string{"", "", "", "429", "429", "429"}) {
			t.Errorf("six calls of an agent with a burst of three: %q", codes)
		}
		for _, req := range []struct{ subject, body string }{{"mcp.v1.agent.bursty.tools.list", `{}`},
			{"mcp.v1.agent.bursty.tools.search", `{"query":"echo"}`}, {"mcp.v1.agent.bursty.rpc.shop", `{"method":"ping"}`}} {
			if m, err := bursty.Request(req.subject, []byte(req.body), 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "429" {
				t.Errorf("%s past the agent's rate: %v %v", req.subject, err, m.Header)
			}
		}
		time.Sleep(300 * time.Millisecond) // the events of the calls that ran
		if len(events) != 3 {
			t.Errorf("%d call events of three calls run and three refused", len(events))
		}
	})

	t.Run("rpc requests take only its own share", func(t *testing.T) {
		// Six reads at once, each a second long, from an agent whose share
		// is two: four are refused at once, as calls past it are.
		var wg sync.WaitGroup
		codes := make([]string, 6)
		start := time.Now()
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := whole.Request("mcp.v1.agent.whole.rpc.shop", []byte(`{"method":"resources/read","params":{"uri":"test://greeting"}}`), 10*time.Second)
				if err != nil {
					codes[i] = err.Error()
					return
				}
				codes[i] = m.Header.Get("Nats-Service-Error-Code")
			}()
		}
		wg.Wait()
		refused := 0
		for _, c := range codes {
			if c == "503" {
				refused++
			}
		}
		if refused != 4 {
			t.Errorf("six reads at once of an agent with a share of two: %q (in %v)", codes, time.Since(start))
		}
	})
}
