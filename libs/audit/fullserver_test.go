package audit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
)

// TestChainGoesOnAfterTheServerWasFull: a NATS server whose storage used
// passes its max refuses the audit stream's writes too, whatever the stream
// reserved (docs/security.md says so); the events appended meanwhile wait in
// the queue and are stored, in one verifying chain, once room is back,
// without a restart.
func TestChainGoesOnAfterTheServerWasFull(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{InProcessOnly: true, StoreDir: t.TempDir(), MaxStore: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, bus.AuditStream(bus.NewSubjects(prefix), time.Hour, 16<<20)); err != nil {
		t.Fatal(err)
	}
	kp, pub := newKey(t)
	w := writer(t, nc, "runner", kp)
	if err := w.Write(ctx, prefix+".events.call.echo", event(0)); err != nil {
		t.Fatal(err)
	}
	// An unbounded bucket fills the server.
	fill, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fill"})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1<<20)
	for i := 0; ; i++ {
		if _, err := fill.Put(ctx, fmt.Sprint("k", i), val); err != nil {
			if !bus.StoreFull(err) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	if err := w.Write(ctx, prefix+".events.call.echo", event(1)); !bus.StoreFull(err) {
		t.Fatalf("an audit write on a full server: %v; want it refused for want of storage", err)
	}
	for i := 2; i < 12; i++ {
		w.Append(prefix+".events.call.echo", event(i))
	}
	time.Sleep(500 * time.Millisecond)
	if err := js.DeleteKeyValue(ctx, "fill"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, _ := read(t, js, Keys{pub: {Name: "runner", Role: "runner"}}, From{})
		n := rep.Events
		if n == 11 {
			if !rep.OK() || len(rep.Chains) != 1 {
				t.Fatalf("the chain after the server was full: chains %+v, problems %v", rep.Chains, first(rep.Problems, 3))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events stored 20 s after room came back; want 11 (the first and the 10 appended)", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
