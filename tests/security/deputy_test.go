package security

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestNoConfusedDeputy: an agent cannot make a service act for it beyond its
// own rights. Every request it may send, sent with a reply subject aimed at
// the JetStream API or a KV key, is dropped by the responder (it would have
// purged the audit stream, overwritten an API key or deleted every config
// when responders had allow_responses); its tool globs mean exactly the
// tools they match; it sees only its tools and its servers' events; its
// flood of calls takes only its own share. The attacker is a plain nats.go
// client with the agent's seed.
func TestNoConfusedDeputy(t *testing.T) {
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"safe", "other"} {
		cfg := model.McpConfig{Name: name, Enabled: true,
			Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
			EnvVars:   map[string]model.EnvVar{"PUBLIC_NOTE": {Value: "note of " + name}},
			Transport: model.Transport{Type: model.TransportStdio}, Runtime: model.Runtime{Eager: true}}
		if _, err := st.Client.CreateConfig(ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	connect := func(name string, allow ...string) (*nats.Conn, *violations) {
		t.Helper()
		// Rates well above the floods here, which test the shares of
		// calls in flight (TestAgentReach tests the rates).
		a, err := st.CreateAgent(model.AgentCreateRequest{Name: name, Allow: allow, Rate: &model.KeyRate{RPS: 10000, Burst: 10000}})
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
	narrow, nv := connect("narrow", "safe__ech*")
	echoes, _ := connect("echoes", "*__echo")
	flood, _ := connect("flood", "safe__sleep")
	calm, _ := connect("calm", "safe__*")

	// Wait until both servers answer the narrow agent's allowed call.
	call := func(nc *nats.Conn, subject, args string) (*nats.Msg, error) {
		return nc.Request(subject, []byte(args), 10*time.Second)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := call(narrow, "mcp.v1.agent.narrow.call.safe.echo", `{"message":"up"}`)
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("safe__echo never answered the agent: %v %v", err, m)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The state is read with the identities that may read it (the operator
	// may not read every stream).
	jsAs := func(role access.Role) jetstream.JetStream {
		nc, err := st.ConnectAs("inspect-"+string(role), role)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	configJS, gatewayJS, runnerJS := jsAs(access.Config), jsAs(access.Gateway), jsAs(access.Runner)
	msgs := func(stream string) uint64 {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := configJS.Stream(c, stream)
		if err != nil {
			t.Fatalf("stream %s: %v", stream, err)
		}
		return s.CachedInfo().State.Msgs
	}
	// The API key bucket, as a gateway makes it (this stack runs no HTTP edge).
	if _, err := gatewayJS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "mcp_apikeys"}); err != nil {
		t.Fatal(err)
	}
	eventsBefore, configsBefore := msgs("MCP_EVENTS"), msgs("KV_mcp_configs")

	t.Run("replies aimed at JetStream are dropped", func(t *testing.T) {
		evil := []string{"$JS.API.STREAM.PURGE.MCP_EVENTS", "$JS.API.STREAM.DELETE.KV_mcp_configs",
			"$KV.mcp_apikeys.evil", "$KV.mcp_configs.evil", "$KV.mcp_agents.narrow", "$KV.mcp_tools.evil", "$KV.mcp_status.evil", "$KV.mcp_approvals.evil", "mcp.v1.config.delete", "_I"}
		requests := map[string]string{
			"mcp.v1.agent.narrow.tools.list":       `{}`,
			"mcp.v1.agent.narrow.tools.search":     `{"query":"echo"}`,
			"mcp.v1.agent.narrow.call.safe.echo":   `{"id":"evil","name":"evil","scopes":["admin"],"hash":"x","message":"x"}`,
			"mcp.v1.agent.narrow.rpc.safe":         `{"method":"ping"}`,
			"mcp.v1.agent.narrow.cancel.safe":      `{"request_id":"r1"}`,
			"mcp.v1.agent.narrow.call.safe.nosuch": `{}`,
		}
		for subject, body := range requests {
			for _, reply := range evil {
				if err := narrow.PublishRequest(subject, reply, []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := narrow.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the responders have had them
		if got := msgs("MCP_EVENTS"); got < eventsBefore {
			t.Errorf("the audit stream went from %d to %d messages", eventsBefore, got)
		}
		if got := msgs("KV_mcp_configs"); got != configsBefore {
			t.Errorf("the configs bucket went from %d to %d messages", configsBefore, got)
		}
		// The runner itself may write the catalog, status and held-call
		// buckets: only the responders' own check keeps its reply out of them.
		for bucket, js := range map[string]jetstream.JetStream{"mcp_apikeys": gatewayJS, "mcp_configs": configJS, "mcp_tools": runnerJS, "mcp_status": runnerJS, "mcp_approvals": runnerJS} {
			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatalf("bucket %s: %v", bucket, err)
			}
			if e, err := kv.Get(ctx, "evil"); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("%s.evil was written: %v %v", bucket, e, err)
			}
		}
		kv, err := runnerJS.KeyValue(ctx, "mcp_agents")
		if err != nil {
			t.Fatal(err)
		}
		if e, err := kv.Get(ctx, "narrow"); err != nil || !strings.Contains(string(e.Value()), "safe__ech*") {
			t.Errorf("the agent's record changed: %v %v", e, err)
		}
		// The same requests with an inbox reply are answered as ever.
		if m, err := call(narrow, "mcp.v1.agent.narrow.rpc.safe", `{"method":"ping"}`); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Errorf("ping with an inbox reply: %v %v", err, m)
		}
	})

	t.Run("replies aimed at another agent's inbox are dropped", func(t *testing.T) {
		// NATS lets a publisher name any reply subject, and the runner may
		// publish into every inbox: the reply, the progress and a server's
		// requests of one agent's call must not reach another agent.
		theirs, err := echoes.SubscribeSync("_I.agent-echoes.>")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = theirs.Unsubscribe() }()
		if err := echoes.Flush(); err != nil {
			t.Fatal(err)
		}
		for subject, body := range map[string]string{
			"mcp.v1.agent.narrow.tools.list":     `{}`,
			"mcp.v1.agent.narrow.tools.search":   `{"query":"echo"}`,
			"mcp.v1.agent.narrow.call.safe.echo": `{"message":"x"}`,
			"mcp.v1.agent.narrow.rpc.safe":       `{"method":"ping"}`,
		} {
			m := nats.NewMsg(subject)
			m.Reply, m.Data = "_I.agent-echoes.stolen", []byte(body)
			m.Header.Set("Mcp-Request-Id", "steal-1")
			m.Header.Set("Mcp-Progress-Subject", "_I.agent-echoes.progress")
			if err := narrow.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := narrow.Flush(); err != nil {
			t.Fatal(err)
		}
		if m, err := theirs.NextMsg(2 * time.Second); err == nil {
			t.Fatalf("another agent's inbox got %s: %s", m.Subject, m.Data)
		}
	})

	t.Run("globs mean exactly their tools", func(t *testing.T) {
		refused := func(nc *nats.Conn, subject string) {
			t.Helper()
			m, err := call(nc, subject, `{"name":"PUBLIC_NOTE"}`)
			if err == nil && m.Header.Get("Nats-Service-Error-Code") != "404" {
				t.Errorf("%s answered: %s %v", subject, m.Data, m.Header)
			}
		}
		refused(narrow, "mcp.v1.agent.narrow.call.safe.env")  // everything__ech* is not env
		refused(echoes, "mcp.v1.agent.echoes.call.other.env") // *__echo is not another server's env
		if m, err := call(echoes, "mcp.v1.agent.echoes.call.other.echo", `{"message":"hi"}`); err != nil || !strings.Contains(string(m.Data), "hi") {
			t.Errorf("*__echo may call other__echo: %v %v", err, m)
		}
		m, err := call(narrow, "mcp.v1.agent.narrow.tools.list", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		var list model.ToolsListReply
		if err := json.Unmarshal(m.Data, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Tools) != 1 || list.Tools[0].Name != "safe__echo" || list.Tools[0].Subject != "mcp.v1.agent.narrow.call.safe.echo" {
			t.Errorf("the narrow agent's tools.list: %+v", list.Tools)
		}
		// Its search ranks only its own tools: env, sleep and the other
		// server's echo match the query too, and are not there.
		m, err = call(narrow, "mcp.v1.agent.narrow.tools.search", `{"query":"echo env sleep environment variable","limit":20}`)
		if err != nil {
			t.Fatal(err)
		}
		var found model.ToolsSearchReply
		if err := json.Unmarshal(m.Data, &found); err != nil {
			t.Fatal(err)
		}
		if len(found.Tools) != 1 || found.Tools[0].Name != "safe__echo" || found.Tools[0].Subject != "mcp.v1.agent.narrow.call.safe.echo" || len(found.Scores) != 1 {
			t.Errorf("the narrow agent's tools.search: %s", m.Data)
		}
		if m, err := call(calm, "mcp.v1.agent.calm.tools.search", `{"query":"echo env sleep environment variable","limit":20}`); err != nil || !strings.Contains(string(m.Data), "safe__env") || strings.Contains(string(m.Data), "other__") {
			t.Errorf("the calm agent's tools.search (safe__* only): %v %v", m, err)
		}
		m, err = call(narrow, "mcp.v1.agent.narrow.rpc.safe", `{"method":"tools/list"}`)
		if err != nil {
			t.Fatal(err)
		}
		var rl struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		if err := json.Unmarshal(m.Data, &rl); err != nil || len(rl.Tools) != 1 || rl.Tools[0].Name != "echo" {
			t.Errorf("the narrow agent's rpc tools/list: %s %v", m.Data, err)
		}
		// Resources, prompts and completions are no one tool's: a grant of
		// some tools does not reach them, one of all the server's does.
		for _, req := range []string{`{"method":"resources/list"}`, `{"method":"resources/read","params":{"uri":"test://greeting"}}`,
			`{"method":"prompts/get","params":{"name":"greet","arguments":{"who":"x"}}}`} {
			m, err := call(narrow, "mcp.v1.agent.narrow.rpc.safe", req)
			if err != nil || m.Header.Get("Nats-Service-Error-Code") != "401" || strings.Contains(string(m.Data), "Hello") {
				t.Errorf("the narrow agent's rpc %s: %v %v %s", req, err, m.Header, m.Data)
			}
			if m, err := call(calm, "mcp.v1.agent.calm.rpc.safe", req); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
				t.Errorf("the calm agent's (safe__*) rpc %s: %v %s", req, err, m.Data)
			}
		}
	})

	t.Run("events of its own calls only, never chat", func(t *testing.T) {
		// A server's call events name every caller and carry their error
		// texts: not an agent's to read, even on its own server.
		for _, subject := range []string{"mcp.v1.events.call.other", "mcp.v1.events.call.safe", "mcp.v1.events.chat.*", "mcp.v1.events.config.*",
			"mcp.v1.agent.calm.events.call.safe"} {
			sub, err := narrow.Subscribe(subject, func(*nats.Msg) {})
			if err == nil {
				defer func() { _ = sub.Unsubscribe() }()
			}
			if !nv.wait(subject) {
				t.Errorf("the narrow agent subscribed to %s", subject)
			}
		}
		got := make(chan *nats.Msg, 4)
		sub, err := narrow.ChanSubscribe("mcp.v1.agent.narrow.events.call.*", got)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := narrow.Flush(); err != nil {
			t.Fatal(err)
		}
		// Another agent's call on the same server reaches it not; its own does.
		if _, err := call(calm, "mcp.v1.agent.calm.call.safe.echo", `{"message":"calm's"}`); err != nil {
			t.Fatal(err)
		}
		if _, err := call(narrow, "mcp.v1.agent.narrow.call.safe.echo", `{"message":"seen"}`); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			var ev model.CallEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Caller != "agent:narrow" || ev.Server != "safe" {
				t.Errorf("call event %s: %v", m.Data, err)
			}
			if m.Reply != "" {
				t.Errorf("the agent's call event has a reply subject %s", m.Reply)
			}
		case <-time.After(5 * time.Second):
			t.Error("no call event of its own call")
		}
		select {
		case m := <-got:
			t.Errorf("a second call event reached the narrow agent: %s", m.Data)
		case <-time.After(300 * time.Millisecond):
		}
	})

	t.Run("a flood takes only its own share", func(t *testing.T) {
		// The other agent's 100 calls, 8 at a time, with their latencies.
		calmRound := func() (failed int64, p50, p99 time.Duration) {
			var n atomic.Int64
			var mu sync.Mutex
			var took []time.Duration
			var others sync.WaitGroup
			work := make(chan int)
			for range 8 {
				others.Go(func() {
					for range work {
						start := time.Now()
						m, err := call(calm, "mcp.v1.agent.calm.call.safe.echo", `{"message":"calm"}`)
						if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
							n.Add(1)
							t.Logf("calm call: %v %v", err, m)
							continue
						}
						mu.Lock()
						took = append(took, time.Since(start))
						mu.Unlock()
					}
				})
			}
			for i := range 100 {
				work <- i
			}
			close(work)
			others.Wait()
			slices.Sort(took)
			if len(took) == 0 {
				return n.Load(), 0, 0
			}
			return n.Load(), took[len(took)/2], took[len(took)*99/100]
		}
		_, quietP50, quietP99 := calmRound()
		var wg sync.WaitGroup
		var admitted, refusedN atomic.Int64
		for range 400 {
			wg.Go(func() {
				m, err := flood.Request("mcp.v1.agent.flood.call.safe.sleep", []byte(`{"ms":3000}`), 20*time.Second)
				switch {
				case err != nil:
				case m.Header.Get("Nats-Service-Error-Code") == "503":
					refusedN.Add(1)
				default:
					admitted.Add(1)
				}
			})
		}
		time.Sleep(300 * time.Millisecond) // the flood is in flight
		// The operator's 10 calls at once, and the other agent's round.
		var failed atomic.Int64
		var others sync.WaitGroup
		for range 10 {
			others.Go(func() {
				if m, err := call(st.Conn, "mcp.v1.call.safe.echo", `{"message":"operator"}`); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
					failed.Add(1)
					t.Logf("operator call: %v %v", err, m)
				}
			})
		}
		calmFailed, floodP50, floodP99 := calmRound()
		failed.Add(calmFailed)
		others.Wait()
		wg.Wait()
		if failed.Load() != 0 {
			t.Errorf("%d of the other callers' 110 calls failed during the flood", failed.Load())
		}
		if admitted.Load() > 16 || refusedN.Load() < 384 {
			t.Errorf("the flood: %d admitted, %d refused (its share is 16)", admitted.Load(), refusedN.Load())
		}
		t.Logf("flood: %d admitted, %d refused; the others' 110 calls all answered; the other agent's calls p50 %s p99 %s during the flood, %s / %s before",
			admitted.Load(), refusedN.Load(), floodP50.Round(time.Microsecond), floodP99.Round(time.Microsecond), quietP50.Round(time.Microsecond), quietP99.Round(time.Microsecond))
	})

	t.Run("an agent answers its own call's elicitation, into the runner's answers inbox only", func(t *testing.T) {
		inbox := "_I.agent-calm.asks." + fmt.Sprint(time.Now().UnixNano())
		asked, err := calm.Subscribe(inbox, func(m *nats.Msg) {
			if !strings.HasPrefix(m.Reply, "_I.") || !strings.Contains(m.Reply, ".answers.") {
				t.Errorf("the server's request came with reply %q", m.Reply)
			}
			_ = m.Respond([]byte(`{"action":"accept","content":{"name":"Ada"}}`))
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = asked.Unsubscribe() }()
		msg := nats.NewMsg("mcp.v1.agent.calm.call.safe.ask")
		msg.Header.Set("Mcp-Request-Id", "ask-1")
		msg.Header.Set("Mcp-Client-Subject", inbox)
		msg.Data = []byte(`{"message":"who are you?"}`)
		m, err := calm.RequestMsg(msg, 20*time.Second)
		if err != nil || !strings.Contains(string(m.Data), "hello Ada") {
			t.Errorf("ask: %v %v", err, m)
		}
	})

	t.Run("a cancellation reaches only the caller's own call", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			msg := nats.NewMsg("mcp.v1.agent.flood.call.safe.sleep")
			msg.Header.Set("Mcp-Request-Id", "victim-1")
			msg.Data = []byte(`{"ms":1500}`)
			m, err := flood.RequestMsg(msg, 10*time.Second)
			if err == nil && m.Header.Get("Nats-Service-Error-Code") != "" {
				err = fmt.Errorf("%s", m.Header.Get("Nats-Service-Error"))
			}
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		if err := calm.Publish("mcp.v1.agent.calm.cancel.safe", []byte(`{"request_id":"victim-1"}`)); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Errorf("another agent's cancellation ended the call: %v", err)
		}
	})

	t.Run("progress reaches only its own call, whatever the request ids", func(t *testing.T) {
		// Two agents on one server, at once, with the same request id.
		type seen struct {
			totals map[float64]int
			err    error
		}
		run := func(nc *nats.Conn, agent string, steps int, out chan<- seen) {
			inbox := nc.NewRespInbox()
			sub, err := nc.SubscribeSync(inbox)
			if err != nil {
				out <- seen{err: err}
				return
			}
			defer func() { _ = sub.Unsubscribe() }()
			msg := nats.NewMsg("mcp.v1.agent." + agent + ".call.safe.progress")
			msg.Header.Set("Mcp-Request-Id", "req-1")
			msg.Header.Set("Mcp-Progress-Subject", inbox)
			msg.Data = fmt.Appendf(nil, `{"steps":%d,"ms":100}`, steps)
			if _, err := nc.RequestMsg(msg, 10*time.Second); err != nil {
				out <- seen{err: err}
				return
			}
			totals := map[float64]int{}
			for {
				m, err := sub.NextMsg(300 * time.Millisecond)
				if err != nil {
					break
				}
				var ev struct{ Total float64 }
				_ = json.Unmarshal(m.Data, &ev)
				totals[ev.Total]++
			}
			out <- seen{totals: totals}
		}
		prog, _ := connect("prog", "safe__progress")
		a, b := make(chan seen, 1), make(chan seen, 1)
		go run(calm, "calm", 3, a)
		go run(prog, "prog", 6, b)
		ga, gb := <-a, <-b
		if ga.err != nil || gb.err != nil {
			t.Fatalf("calls: %v, %v", ga.err, gb.err)
		}
		if len(ga.totals) != 1 || ga.totals[3] != 3 || len(gb.totals) != 1 || gb.totals[6] != 6 {
			t.Fatalf("progress by total: calm %v (want 3 of 3), prog %v (want 6 of 6)", ga.totals, gb.totals)
		}
	})
}
