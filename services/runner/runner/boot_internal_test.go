package runner

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestCallBeforeBootStartsTheServer: a runner that takes a server
// subscribes to its calls (serve) before its boot runs on the server's
// goroutine. A call arriving in between met the server's initial state,
// "stopped", and was refused with SERVICE_UNAVAILABLE "server x is
// stopped" instead of starting it (lazy start on the first call): seen
// right after a create with enabled true. Here the boot is held back, so
// the call is sure to arrive first.
func TestCallBeforeBootStartsTheServer(t *testing.T) {
	r, nc, bin := startBootRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// takeServer without its boot.
	cfg := &model.McpConfig{Name: "fresh", Slug: "fresh", Enabled: true,
		Package: model.Package{Type: model.PackageBinary, Identifier: bin}, Transport: model.Transport{Type: model.TransportStdio}}
	s := newServer(r, cfg)
	r.mu.Lock()
	r.servers[cfg.Slug] = s
	r.mu.Unlock()
	defer s.close(model.StateStopped, false)
	if err := s.serve(); err != nil {
		t.Fatal(err)
	}

	c := client.New(nc, client.Options{Timeout: 20 * time.Second})
	raw, err := c.Call(ctx, cfg.Slug, "echo", json.RawMessage(`{"message":"first"}`), nil)
	if err != nil {
		t.Fatalf("a call before the boot: %v, want the server started for it", err)
	}
	if !strings.Contains(string(raw), "first") {
		t.Fatalf("reply %s", raw)
	}
	// The boot that comes later finds it running and leaves it so. (Run
	// through do: post queues from a goroutine of its own, so a do after
	// it may run first, and the boot after the stop below.)
	if err := s.do(func() error { s.boot(); return nil }); err != nil {
		t.Fatal(err)
	}
	if st := s.status(); st.State != model.StateRunning {
		t.Fatalf("after the boot: %+v", st)
	}
	// A server stopped on purpose (runtime.stop) still refuses calls.
	if err := s.do(func() error { s.stop(model.StateStopped, false); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, cfg.Slug, "echo", json.RawMessage(`{"message":"again"}`), nil); err == nil || !strings.Contains(err.Error(), "is stopped") {
		t.Fatalf("a call after runtime.stop: %v, want refused as stopped", err)
	}
}

// A stop that reaches a server its runner has just taken, before the boot
// ran (runtime.stop racing the takeover), is the operator's: the boot
// leaves the server stopped instead of starting it over the stop.
func TestStopBeforeBootIsKept(t *testing.T) {
	r, _, bin := startBootRunner(t)
	cfg := &model.McpConfig{Name: "fresh", Slug: "fresh", Enabled: true, Runtime: model.Runtime{Eager: true},
		Package: model.Package{Type: model.PackageBinary, Identifier: bin}, Transport: model.Transport{Type: model.TransportStdio}}
	s := newServer(r, cfg)
	r.mu.Lock()
	r.servers[cfg.Slug] = s
	r.mu.Unlock()
	defer s.close(model.StateStopped, false)
	if err := s.do(func() error { s.stop(model.StateStopped, false); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.do(func() error { s.boot(); return nil }); err != nil {
		t.Fatal(err)
	}
	if st := s.status(); st.State != model.StateStopped || st.PID != 0 {
		t.Fatalf("after a stop and then the boot: %+v, want stopped", st)
	}
}

// startBootRunner runs a runner, ready, on an embedded NATS with the bus's
// assets, for tests that take a server on it by hand (without its boot).
// It returns the runner, a connection of the caller's and the test
// server's binary; all of it ends with the test.
func startBootRunner(t *testing.T) (*Runner, *nats.Conn, string) {
	t.Helper()
	bin, cleanup, err := testkit.BuildTestServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	ns := testkit.NATS(t)
	nc := testkit.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := New(testkit.Connect(t, ns), Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		StartTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("runner ended at start: %v", err)
	case <-ctx.Done():
		t.Fatal("runner not ready")
	}
	return r, nc, bin
}
