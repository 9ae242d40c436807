package audit

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/natsconn"
)

// On a bus with the permission table, every identity (each service role,
// the operator, an agent) is refused purging, deleting from, deleting and
// updating the audit stream; writers write their own role's chains only;
// the operator reads and verifies them.
func TestAppendOnlyForEveryIdentity(t *testing.T) {
	store, err := access.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]access.Identity{}
	var users []*server.NkeyUser
	for _, role := range access.ServiceRoles() {
		id, err := store.Ensure(string(role), role)
		if err != nil {
			t.Fatal(err)
		}
		u, err := access.User(id, prefix)
		if err != nil {
			t.Fatal(err)
		}
		ids[string(role)], users = id, append(users, u)
	}
	agent, err := store.Ensure(access.AgentIdentity("a1"), access.Agent)
	if err != nil {
		t.Fatal(err)
	}
	u, err := access.AgentUser(agent, prefix, "a1", []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	ids["agent"], users = agent, append(users, u)
	srv, err := embednats.Start(embednats.Options{InProcessOnly: true, StoreDir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn := func(name string) (*nats.Conn, jetstream.JetStream, nkeys.KeyPair) {
		id := ids[name]
		o := natsconn.Options{Seed: id.Seed, InboxPrefix: id.Inbox()}
		nc, err := o.Dial(name, natsconn.FailFast, slog.New(slog.DiscardHandler), nats.InProcessServer(srv.Server))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := o.Identity()
		if err != nil {
			t.Fatal(err)
		}
		return nc, js, kp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The runner creates the stream as bus.EnsureAssets does, and writes.
	rnc, rjs, rkp := conn("runner")
	if _, err := bus.EnsureAssets(ctx, rjs, bus.NewSubjects(prefix), bus.AssetOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(rnc, WriterOptions{Prefix: prefix, Role: "runner", Key: rkp})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := w.Write(ctx, prefix+".events.call.echo", event(i)); err != nil {
			t.Fatal(err)
		}
	}
	// A writer of another role's chain is refused.
	forged, err := NewWriter(rnc, WriterOptions{Prefix: prefix, Role: "config", Key: rkp, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := forged.Write(ctx, prefix+".events.config.x", event(0)); err == nil {
		t.Fatal("a runner wrote a config chain")
	}

	api := "$JS.API.STREAM."
	ops := map[string]string{
		"purge":      api + "PURGE." + bus.StreamAudit,
		"msg delete": api + "MSG.DELETE." + bus.StreamAudit,
		"delete":     api + "DELETE." + bus.StreamAudit,
		"update":     api + "UPDATE." + bus.StreamAudit,
	}
	bodies := map[string]string{"msg delete": `{"seq":1}`, "update": `{"name":"MCP_AUDIT","subjects":["mcp.v1.audit.>"],"deny_delete":false,"deny_purge":false}`}
	var wg sync.WaitGroup
	for name := range ids {
		nc, _, _ := conn(name)
		for op, subj := range ops {
			wg.Go(func() {
				m, err := nc.Request(subj, []byte(bodies[op]), 500*time.Millisecond)
				if err == nil {
					t.Errorf("%s: %s answered: %s", name, op, m.Data)
				}
			})
		}
	}
	wg.Wait()
	// Nothing changed: the stream, its records and its settings.
	_, ojs, _ := conn("operator")
	st, err := ojs.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo(); c.State.Msgs != 3 || !c.Config.DenyDelete || !c.Config.DenyPurge {
		t.Fatalf("stream after the attempts: %d records, deny delete %v, deny purge %v", c.State.Msgs, c.Config.DenyDelete, c.Config.DenyPurge)
	}
	pub, _ := rkp.PublicKey()
	// The operator (audit verify) and the gateway (its verify endpoint) read it.
	_, gjs, _ := conn("gateway")
	for who, js := range map[string]jetstream.JetStream{"operator": ojs, "gateway": gjs} {
		var n int
		v := NewVerifier(Keys{pub: {Name: "runner", Role: "runner"}}, VerifyOptions{FromStart: true})
		if _, err := ReadStream(ctx, js, From{}, 5*time.Second, func(e Entry) { n++; v.Add(e) }); err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if rep := v.Report(); n != 3 || !rep.OK() {
			t.Fatalf("%s read %d records: %+v", who, n, rep)
		}
	}
}
