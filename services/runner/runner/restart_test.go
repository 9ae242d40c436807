package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// gate is a dialer that refuses to connect while closed: it holds the
// runner's reconnect back until the test lets it through.
type gate struct{ closed atomic.Bool }

func (g *gate) Dial(network, address string) (net.Conn, error) {
	if g.closed.Load() {
		return nil, errors.New("gate closed")
	}
	return (&net.Dialer{Timeout: 2 * time.Second}).Dial(network, address)
}

// side connects a test client to ns over TCP: the shared buckets and a client.
func side(t *testing.T, ns *embednats.Server) (runnertest.Buckets, *client.Client) {
	t.Helper()
	nc, err := ns.ConnectTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var assets *bus.Assets
	deadline := time.Now().Add(15 * time.Second)
	for { // right after a restart JetStream may need a moment
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		assets, err = bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return runnertest.Buckets{Assets: assets, Store: configstore.Store{KV: assets.Configs}},
		client.New(nc, client.Options{Timeout: 10 * time.Second})
}

// A runner whose NATS server restarts keeps following the shared buckets:
// what changed while it was cut off (a config deleted, a config changed, a
// catalog written by another runner) reaches it on reconnect, and so does
// what changes later. A plain KV watch would stay silent for 10 to 20s.
func TestFollowsBucketsAcrossServerRestart(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			ns.Stop()
		}
	})
	g := &gate{}
	rnc, err := ns.ConnectTCP(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.SetCustomDialer(g))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rnc.Close)
	b, _ := side(t, ns)

	opts := quickOpts()
	opts.LeaseTTL = 10 * time.Second // the servers stay owned across the short outage
	r, err := runner.New(rnc, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopRunner := sync.OnceFunc(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("runner did not stop within 30s")
		}
	})
	t.Cleanup(stopRunner)
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("runner ended at start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runner not ready within 10s")
	}
	alphaCfg := runnertest.Binary("alpha", testServer)
	alphaCfg.EnvVars = map[string]model.EnvVar{"MODE": {Value: "one"}}
	alphaCfg = b.Put(t, alphaCfg)
	betaCfg := b.Put(t, runnertest.Binary("beta", testServer))
	alpha := b.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	beta := b.WaitState(t, "beta", model.StateRunning, 10*time.Second)

	// Restart NATS; while the runner is held off, delete beta, change alpha
	// and publish another runner's catalog.
	g.closed.Store(true)
	ns.Stop()
	stopped = true
	ns2, err := embednats.Start(ns.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	b2, c2 := side(t, ns2)
	b2.Delete(t, betaCfg.ID)
	alphaCfg.EnvVars = map[string]model.EnvVar{"MODE": {Value: "two"}}
	b2.Put(t, alphaCfg)
	zeta, _ := json.Marshal(model.Catalog{Server: "zeta", Tools: []model.Tool{{Name: "zeta__ping", Server: "zeta", Tool: "ping"}}})
	putCtx, putCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer putCancel()
	if _, err := b2.Assets.Tools.Put(putCtx, "zeta", zeta); err != nil {
		t.Fatal(err)
	}
	if n := rnc.Stats().Reconnects; n != 0 {
		t.Fatalf("the runner reconnected through a closed gate (%d)", n)
	}
	g.closed.Store(false)

	waitGone(t, beta.PID, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := b2.Status("alpha")
		if st.State == model.StateRunning && st.PID != alpha.PID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha not restarted with the config changed during the outage: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	callCtx, callCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer callCancel()
	if res, err := c2.Call(callCtx, "alpha", "env", json.RawMessage(`{"name":"MODE"}`), nil); err != nil || text(t, res) != "two" {
		t.Fatalf("MODE after the outage: %s %v", res, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
		tools, err := c2.ListTools(lctx, "")
		lcancel()
		names := make([]string, 0, len(tools))
		for _, tl := range tools {
			names = append(names, tl.Name)
		}
		if err == nil && slices.Contains(names, "zeta__ping") && !slices.Contains(names, "beta__echo") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools.list after the outage: %v %v (want zeta__ping, no beta tools)", names, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Later changes arrive as well.
	b2.Put(t, runnertest.Binary("gamma", testServer))
	b2.WaitState(t, "gamma", model.StateRunning, 10*time.Second)
	stopRunner() // while NATS still runs: a runner stops faster with it
}
