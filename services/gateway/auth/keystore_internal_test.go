package auth

import (
	"context"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// After a NATS restart the store's watch resumes: the cache becomes current
// again (Authenticate stops reading through) and follows a revocation made
// after the restart.
func TestWatchResumesAfterServerRestart(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ns.ConnectTCP(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	open := func(nc *nats.Conn) *KeyStore {
		t.Helper()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := OpenKeyStore(ctx, js, StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	s := open(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, err := s.Create(ctx, model.KeyCreateRequest{Name: "survivor"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.current() {
		t.Fatal("the cache is not current after the first load")
	}

	ns.Stop()
	ns2, err := embednats.Start(ns.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 10s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("reconnect", func() bool { return nc.Stats().Reconnects > 0 })
	waitFor("current cache after the restart", s.current)

	other := testkit.Connect(t, ns2)
	if _, err := open(other).Revoke(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	waitFor("revocation in the watched cache", func() bool {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.cache[key.ID].rec.Revoked()
	})
	if !s.current() {
		t.Fatal("the cache is not current")
	}
}
