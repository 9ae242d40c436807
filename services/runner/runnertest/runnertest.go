// Package runnertest starts real parts for tests: an embedded NATS server, a
// runner on it, a client, and the config bucket to put servers in.
package runnertest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
)

// Env is a running bus with one runner.
type Env struct {
	NS *embednats.Server
	// NC is the callers' connection, over TCP like an agent's; the runner has
	// its own in-process one, as in `mcpbus up`.
	NC       *nats.Conn
	RunnerNC *nats.Conn
	JS       jetstream.JetStream
	Runner   *runner.Runner
	Client   *client.Client
	Buckets
	stop context.CancelFunc
	done chan error
}

// Start runs NATS (TCP on a free port, JetStream in a temp dir) and a runner
// with opts; both stop when the test ends.
func Start(t testing.TB, opts runner.Options) *Env {
	t.Helper()
	return StartNATS(t, embednats.Options{}, opts)
}

// StartNATS is Start on a NATS server of nopts (its port and store dir are
// the test's own).
func StartNATS(t testing.TB, nopts embednats.Options, opts runner.Options) *Env {
	t.Helper()
	nopts.Port, nopts.StoreDir = -1, t.TempDir()
	ns, err := embednats.Start(nopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.ConnectTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rnc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rnc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(opts.Prefix), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{NS: ns, NC: nc, RunnerNC: rnc, JS: js, Buckets: Buckets{Assets: assets, Store: configstore.Store{KV: assets.Configs}},
		Client: client.New(nc, client.Options{Prefix: opts.Prefix, Timeout: 20 * time.Second})}
	e.StartRunner(t, opts)
	return e
}

// StartRunner (re)starts the env's runner with opts.
func (e *Env) StartRunner(t testing.TB, opts runner.Options) {
	t.Helper()
	r, err := runner.New(e.RunnerNC, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.Runner, e.stop, e.done = r, cancel, make(chan error, 1)
	go func() { e.done <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-e.done:
		t.Fatalf("runner ended at start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runner not ready within 10s")
	}
	t.Cleanup(func() { e.StopRunner(t) })
}

// StopRunner stops the runner (as SIGTERM would) and waits for it.
func (e *Env) StopRunner(t testing.TB) {
	if e.stop == nil {
		return
	}
	e.stop()
	e.stop = nil
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Error("runner did not stop within 30s")
	}
}

// Binary is a config that runs a binary over stdio.
func Binary(name, path string, args ...string) model.McpConfig {
	return model.McpConfig{
		Name: name, Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: path, Args: args},
		Transport: model.Transport{Type: model.TransportStdio},
	}
}

// BuildTestServer builds the go-sdk test server into a temp dir and returns
// its path; a TestMain rather calls testkit.Main, which does this and the
// cleanup itself.
func BuildTestServer() (path string, cleanup func(), err error) {
	return testkit.BuildTestServer()
}

// RunnerHandle is one more runner on the env's bus, with its own in-process
// connection, for ownership and failover tests.
type RunnerHandle struct {
	Runner *runner.Runner
	NC     *nats.Conn
	stop   context.CancelFunc
	done   chan error
}

// AddRunner starts another runner with opts; it stops when the test ends.
func (e *Env) AddRunner(t testing.TB, opts runner.Options) *RunnerHandle {
	t.Helper()
	nc, err := e.NS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &RunnerHandle{Runner: r, NC: nc, stop: cancel, done: make(chan error, 1)}
	go func() { h.done <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-h.done:
		t.Fatalf("runner ended at start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runner not ready within 10s")
	}
	t.Cleanup(func() { h.Stop(t); nc.Close() })
	return h
}

// Stop shuts the runner down gracefully (it hands its servers over).
func (h *RunnerHandle) Stop(t testing.TB) {
	if h.stop == nil {
		return
	}
	h.stop()
	h.stop = nil
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
		t.Error("runner did not stop within 30s")
	}
}

// Disconnect cuts the runner off the bus without any goodbye, as a crash or
// a network partition would: it can neither renew its leases nor hand over.
func (h *RunnerHandle) Disconnect(t testing.TB, e *Env) { e.CutOff(t, h.NC) }

// CutOff closes nc without any goodbye and returns once the server has
// dropped it. Until then the server still routes queue-group requests to
// the dead connection, where they are lost; a test that asks right after a
// crash asks what the crash left, not that window.
func (e *Env) CutOff(t testing.TB, nc *nats.Conn) {
	t.Helper()
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cz, err := e.NS.Connz(&server.ConnzOptions{CID: cid})
		if err == nil && len(cz.Conns) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still lists connection %d 10s after it closed", cid)
		}
	}
}
