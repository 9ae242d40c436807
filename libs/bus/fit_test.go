package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// smallServer is a JetStream server with store bytes of file storage: a
// server's default storage is a share of the free disk, so a fuller disk
// looks like this.
func smallServer(t *testing.T, store int64) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		JetStreamMaxStore: store, JetStreamMaxMemory: 64 << 20, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
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

// TestAssetsFitASmallServer: the shared assets come up on a server with less
// storage than their default bounds (1 GiB each), each bounded by a share of
// what was left, instead
// of start-up waiting forever on "insufficient storage resources" (CI's
// split stacks did, on a machine with less free disk).
func TestAssetsFitASmallServer(t *testing.T) {
	const store = 500 << 20
	js := smallServer(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := bus.EnsureAssets(ctx, js, bus.NewSubjects("mcp.v1"), bus.AssetOptions{})
	if err != nil {
		t.Fatalf("EnsureAssets on a 500 MiB server: %v", err)
	}
	var sum int64
	for _, st := range []jetstream.Stream{a.Events, a.Audit} {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b := info.Config.MaxBytes
		if b <= 0 || b >= 1<<30 {
			t.Errorf("%s: MaxBytes %d, want a fitted bound under 1 GiB", info.Config.Name, b)
		}
		sum += b
	}
	if sum > store {
		t.Errorf("the bounds reserve %d bytes, more than the server's %d", sum, store)
	}
	// What is left still takes the chat's streams (made the same way).
	for _, name := range []string{"CHAT_A", "CHAT_B"} {
		if _, err := bus.FitStream(ctx, js, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, MaxBytes: 10 << 30}, nil); err != nil {
			t.Errorf("%s after the shared assets: %v", name, err)
		}
	}
}

// TestFitNeverShrinksAStream: asking an existing stream for more than the
// server can reserve leaves it as it is (a smaller bound than it had would
// drop its oldest records), and says why.
func TestFitNeverShrinksAStream(t *testing.T) {
	js := smallServer(t, 512<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}, MaxBytes: 256 << 20}
	if _, err := bus.FitStream(ctx, js, cfg, nil); err != nil {
		t.Fatal(err)
	}
	cfg.MaxBytes = 1 << 30
	_, err := bus.FitStream(ctx, js, cfg, nil)
	if err == nil {
		t.Fatal("raising the bound past the server's storage succeeded")
	}
	st, err2 := js.Stream(ctx, "KEEP")
	if err2 != nil {
		t.Fatal(err2)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 256<<20 {
		t.Errorf("the stream's bound is %d after a refused raise (%v), want it kept at %d", got, err, 256<<20)
	}
}

// TestFitGivesUpAtTheFloor: a server with no room at all refuses every
// bound; the fit ends with JetStream's error rather than looping.
func TestFitGivesUpAtTheFloor(t *testing.T) {
	js := smallServer(t, 512<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ALL", Subjects: []string{"all.>"}, MaxBytes: 512 << 20}); err != nil {
		t.Fatal(err)
	}
	_, err := bus.FitStream(ctx, js, jetstream.StreamConfig{Name: "MORE", Subjects: []string{"more.>"}, MaxBytes: 1 << 30}, nil)
	if !bus.InsufficientStorage(err) {
		t.Fatalf("got %v, want JetStream's insufficient storage error", err)
	}
}
