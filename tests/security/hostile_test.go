package security

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/natsconn"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

var testServer string

func TestMain(m *testing.M) { testkit.Main(m, &testServer) }

// violations collects a connection's asynchronous permission errors.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err.Error())
}

// wait reports whether a permission violation naming subject arrives within 2s.
func (v *violations) wait(subject string) bool {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		v.mu.Lock()
		for _, e := range v.errs {
			if strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, subject) {
				v.mu.Unlock()
				return true
			}
		}
		v.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// startStack starts mcpbus up in process, its NATS on a free port; extra
// users are allowed besides its identities.
func startStack(t *testing.T, extra ...*server.NkeyUser) *stack.Stack {
	t.Helper()
	logs := &testkit.LogBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), NATSPort: -1, ExtraUsers: extra,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner: runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if t.Failed() {
			t.Logf("log tail:\n%s", logs.Tail(4000))
		}
	})
	return st
}

// connectSeed connects with an identity's seed file as a plain client would.
func connectSeed(t *testing.T, st *stack.Stack, seedFile, inbox string, v *violations) (*nats.Conn, error) {
	t.Helper()
	// Over TCP, as another process on the machine would.
	return natsconn.Options{URLs: st.NATS.ClientURL(), NKeyFile: seedFile, InboxPrefix: inbox}.Dial("hostile", natsconn.FailFast, nil,
		nats.ErrorHandler(v.handler), nats.MaxReconnects(0))
}

// TestHostileClients: what an attacker with a shell on the machine tries
// against mcpbus up's bus is refused by NATS.
func TestHostileClients(t *testing.T) {
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"safe", "other"} {
		cfg := model.McpConfig{Name: name, Enabled: true,
			Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
			Transport: model.Transport{Type: model.TransportStdio}, Runtime: model.Runtime{Eager: true}}
		if _, err := st.Client.CreateConfig(ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("no credentials", func(t *testing.T) {
		if nc, err := nats.Connect(st.NATS.ClientURL(), nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Fatal("a connection without credentials was accepted")
		} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("refused, but not for authorization: %v", err)
		}
	})

	agent, err := st.AddAgent("intruder", []string{"safe__*"})
	if err != nil {
		t.Fatal(err)
	}
	var av violations
	anc, err := connectSeed(t, st, agent.SeedFile, agent.InboxPrefix, &av)
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()

	t.Run("agent may call its tools", func(t *testing.T) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			reply, err := anc.Request("mcp.v1.agent.intruder.call.safe.echo", []byte(`{"message":"allowed"}`), 2*time.Second)
			if err == nil && strings.Contains(string(reply.Data), "allowed") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("allowed call: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// Items of the attack list: each is a publish or subscribe NATS refuses.
	deniedPublish := map[string]string{
		"read every secret (cred.resolve with its own key)": "mcp.v1.cred.resolve",
		"run a command (config.create of a binary)":         "mcp.v1.config.create",
		"mint an admin API key":                             "mcp.v1.keys.create",
		"call a tool it is not allowed":                     "mcp.v1.agent.intruder.call.other.echo",
		"call outside its own subjects":                     "mcp.v1.call.safe.echo",
		"call as another agent":                             "mcp.v1.agent.admin.call.safe.echo",
		"list tools outside its own subjects":               "mcp.v1.tools.list",
		"answer into a runner's inbox (a forged ack)":       "_I.runner.x",
		"write into KV directly":                            "$KV.mcp_configs.x",
		"make agents":                                       "mcp.v1.agents.create",
		"read an OAuth client secret":                       "mcp.v1.cred.oauthclient",
		"forge an OAuth callback to a gateway":              "mcp.v1.oauth.callback.0a1b",
		"revoke OAuth access tokens":                        "mcp.v1.tokens.revoke",
		"write the pending OAuth flows":                     "$KV.mcp_oauth_flows.x",
		"rpc to a server it may not call":                   "mcp.v1.agent.intruder.rpc.other",
		"cancel another server's calls":                     "mcp.v1.agent.intruder.cancel.other",
		"talk to the chat service":                          "mcp.v1.chat.send",
		"run a durable task":                                "mcp.v1.task.create",
		"decide a held call":                                "mcp.v1.approvals.decide",
		"approve a changed tool definition":                 "mcp.v1.tools.approve",
		"change a config":                                   "mcp.v1.config.update",
		"read an API key record":                            "$JS.API.DIRECT.GET.KV_mcp_apikeys.$KV.mcp_apikeys.x",
		"read a config record":                              "$JS.API.STREAM.MSG.GET.KV_mcp_configs",
		"replay the event stream":                           "$JS.API.CONSUMER.CREATE.MCP_EVENTS",
		"read the audit stream":                             "$JS.API.CONSUMER.CREATE.MCP_AUDIT",
		"rewrite the approval rules":                        "$KV.mcp_approval_rules.policy",
		"discover every runner and server":                  "$SRV.INFO",
		"read every server's status":                        "mcp.v1.runtime.status",
		// Another principal's work: a user's durable task, conversation,
		// held /mcp call (a retry passed between gateway instances) and
		// resource subscriptions.
		"read a user's task":                               "mcp.v1.task.get",
		"cancel a user's task":                             "mcp.v1.task.cancel",
		"read a user's conversation":                       "mcp.v1.chat.history",
		"follow a user's conversation":                     "mcp.v1.chat.watch",
		"answer a user's held call on a gateway":           "mcp.v1.gateway.retry.abcdefghijklmnop",
		"subscribe a server's resource outside its prefix": "mcp.v1.rpc.safe",
	}
	for what, subject := range deniedPublish {
		t.Run("agent: "+what, func(t *testing.T) {
			_, err := anc.Request(subject, []byte(`{}`), 500*time.Millisecond)
			if err == nil {
				t.Fatalf("%s answered", subject)
			}
			if !av.wait(subject) {
				t.Fatalf("no permission violation for publishing to %s (request error %v)", subject, err)
			}
		})
	}
	deniedSubscribe := map[string]string{
		"answer and snoop calls (rogue subscriber)":   "mcp.v1.call.safe.*",
		"serve the credential service":                "mcp.v1.cred.resolve",
		"read the operator's replies":                 "_I.operator.>",
		"read every inbox":                            "_INBOX.>",
		"take the OAuth callbacks (codes, sealed)":    "mcp.v1.oauth.callback.*",
		"read chat conversations":                     "mcp.v1.events.chat.*",
		"read every event":                            "mcp.v1.events.>",
		"read another server's calls":                 "mcp.v1.events.call.other",
		"read every caller's calls of its server":     "mcp.v1.events.call.safe",
		"read another agent's calls":                  "mcp.v1.agent.admin.events.call.safe",
		"follow users' tasks":                         "mcp.v1.events.task.*",
		"hear resource updates meant for sessions":    "mcp.v1.events.resource_updated.safe",
		"hear list changes meant for sessions":        "mcp.v1.events.list_changed.safe",
		"read the gateway's replies (users' results)": "_I.gateway.>",
		"take the held calls passed between gateways": "mcp.v1.gateway.retry.*",
	}
	for what, subject := range deniedSubscribe {
		t.Run("agent: "+what, func(t *testing.T) {
			sub, err := anc.Subscribe(subject, func(*nats.Msg) {})
			if err == nil {
				defer func() { _ = sub.Unsubscribe() }()
			}
			if !av.wait(subject) {
				t.Fatalf("no permission violation for subscribing to %s", subject)
			}
		})
	}

	// Another service's identity, not a runner: the gateway's.
	t.Run("gateway identity may not resolve credentials", func(t *testing.T) {
		var gv violations
		gnc, err := connectSeed(t, st, st.Identities.SeedFile(string(access.Gateway)), access.Inbox(string(access.Gateway)), &gv)
		if err != nil {
			t.Fatal(err)
		}
		defer gnc.Close()
		if _, err := gnc.Request("mcp.v1.cred.resolve", []byte(`{}`), 500*time.Millisecond); err == nil {
			t.Fatal("cred.resolve answered the gateway")
		}
		if !gv.wait("mcp.v1.cred.resolve") {
			t.Fatal("no permission violation")
		}
		if sub, err := gnc.Subscribe("mcp.v1.call.>", func(*nats.Msg) {}); err == nil {
			defer func() { _ = sub.Unsubscribe() }()
		}
		if !gv.wait("mcp.v1.call.>") {
			t.Fatal("the gateway identity subscribed to calls")
		}
	})

	t.Run("revoked agent is cut off", func(t *testing.T) {
		closed := make(chan struct{})
		anc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		if err := st.RevokeAgent("intruder"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			if anc.IsConnected() {
				t.Fatal("the revoked agent's connection stays open")
			}
		}
		var v violations
		if nc, err := connectSeed(t, st, agent.SeedFile, agent.InboxPrefix, &v); err == nil {
			nc.Close()
			t.Fatal("a revoked agent connected again")
		} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") &&
			!strings.Contains(err.Error(), "no such file") {
			t.Fatalf("refused for another reason: %v", err)
		}
	})
}
