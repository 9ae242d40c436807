package auth_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// TestRevokedWhileTheWatchWasDown: a key revoked while this gateway's
// connection was down comes back only in the watch's new snapshot; what the
// key holds open (MCP sessions, event streams, tasks) is still ended.
func TestRevokedWhileTheWatchWasDown(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	cut := testkit.NewCut(t, ns.ClientURL())
	nc, err := nats.Connect(cut.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	a, err := auth.OpenKeyStore(ctx(t), js, auth.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	var ended atomic.Value
	a.OnRevoke(func(id string) { ended.Store(id) })
	b := (&env{ns: ns}).openStore(t)
	key, err := a.Create(ctx(t), model.KeyCreateRequest{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx(t), key.Key); err != nil {
		t.Fatal(err)
	}
	cut.Down()
	time.Sleep(300 * time.Millisecond)
	if _, err := b.Revoke(ctx(t), key.ID); err != nil {
		t.Fatal(err)
	}
	cut.Up()
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return ended.Load() == key.ID, "the key's open sessions were not ended (OnRevoke not called)"
	})
}
