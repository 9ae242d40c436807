// Package configflow tests the config, credential and runner services together,
// as `mcpbus up` assembles them (tools/mcpbus/stack): real embedded NATS, the
// real encrypted file store or a real Vault, real MCP server processes.
package configflow

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

var testServer string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer)
}

// env is a running stack plus what the test captured of it.
type env struct {
	*stack.Stack
	dataDir string
	logs    *testkit.LogBuffer
	// super sees every subject (a test-only superuser).
	super *nats.Conn
}

// startStack runs every service in process with debug logs captured.
func startStack(t *testing.T, mutate ...func(*stack.Options)) *env {
	t.Helper()
	logs := &testkit.LogBuffer{}
	opts := stack.Options{
		DataDir: t.TempDir(), InProcessOnly: true,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner: runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second, StartTimeout: 20 * time.Second},
	}
	superUser, superOpt := testkit.Superuser(t)
	opts.ExtraUsers = append(opts.ExtraUsers, superUser)
	for _, m := range mutate {
		m(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the stack: %v", err)
	}
	t.Cleanup(func() {
		st.Close()
		if t.Failed() {
			t.Logf("service log (last 6000 bytes):\n%s", logs.Tail(6000))
		}
	})
	super, err := st.NATS.Connect(nats.Name("test-superuser"), superOpt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	return &env{Stack: st, dataDir: opts.DataDir, logs: logs, super: super}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// binary is a config of the go-sdk test server.
func binary(name string) model.McpConfig {
	return model.McpConfig{
		Name:      name,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
	}
}

// capture records every message on the bus (requests, replies, KV writes,
// events, JetStream API traffic) until the test ends.
type capture struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func captureAll(t *testing.T, nc *nats.Conn) *capture {
	t.Helper()
	c := &capture{}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		c.mu.Lock()
		c.msgs = append(c.msgs, m)
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

func (c *capture) all() []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*nats.Msg(nil), c.msgs...)
}

// waitState polls runtime.status until server is in state.
func (e *env) waitState(t *testing.T, server, state string, within time.Duration) model.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	var st model.Status
	for time.Now().Before(deadline) {
		var err error
		st, err = e.Client.Runtime(ctxFor(t, 5*time.Second), "status", server)
		if err == nil && st.State == state {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server %s: state %q (%s %s), want %q after %s", server, st.State, st.Code, st.Message, state, within)
	return st
}
