package audit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/natsconn"
)

// Two runners have identities of one role: a compromised runner-1 may
// not write runner-2's chain. Before, the table let a role write all of
// its role's chains: junk stored there became runner-2's head (its writer
// then failed on every record, or went on from a forged seq and hash, so
// its chain read as broken) and runner-1 read runner-2's last events.
func TestWriterWritesOnlyItsOwnChain(t *testing.T) {
	store, err := access.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var users []*server.NkeyUser
	ids := map[string]access.Identity{}
	for _, name := range []string{"runner-1", "runner-2"} {
		id, err := store.Ensure(name, access.Runner)
		if err != nil {
			t.Fatal(err)
		}
		u, err := access.User(id, prefix)
		if err != nil {
			t.Fatal(err)
		}
		ids[name], users = id, append(users, u)
	}
	srv, err := embednats.Start(embednats.Options{InProcessOnly: true, StoreDir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := func(name string) (*nats.Conn, *Writer) {
		id := ids[name]
		o := natsconn.Options{Seed: id.Seed, InboxPrefix: id.Inbox()}
		nc, err := o.Dial(name, natsconn.FailFast, slog.New(slog.DiscardHandler), nats.InProcessServer(srv.Server))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		kp, err := o.Identity()
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWriter(nc, WriterOptions{Prefix: prefix, Role: "runner", Key: kp, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close(time.Second) })
		return nc, w
	}
	nc1, w1 := conn("runner-1")
	js1, err := jetstream.New(nc1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureAssets(ctx, js1, bus.NewSubjects(prefix), bus.AssetOptions{}); err != nil {
		t.Fatal(err)
	}
	_, w2 := conn("runner-2")
	if err := w1.Write(ctx, prefix+".events.call.echo", event(1)); err != nil {
		t.Fatalf("runner-1 writing its own chain: %v", err)
	}
	if err := w2.Write(ctx, prefix+".events.call.echo", event(2)); err != nil {
		t.Fatal(err)
	}
	other := bus.NewSubjects(prefix).Audit(w2.Chain())
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer pcancel()
	if _, err := js1.Publish(pctx, other, []byte("not a record")); err == nil {
		t.Fatal("runner-1 wrote runner-2's chain")
	}
	if m, err := nc1.Request("$JS.API.DIRECT.GET."+bus.StreamAudit+"."+other, nil, 500*time.Millisecond); err == nil && m.Header.Get("Status") == "" {
		t.Fatalf("runner-1 read runner-2's head: %.80s", m.Data)
	}
	if err := w2.Write(ctx, prefix+".events.call.echo", event(3)); err != nil {
		t.Fatalf("runner-2 after runner-1's attempt: %v", err)
	}
}
