package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPartitionIsolatesANode: an isolated node has no routes while the two
// others keep theirs (no route went around the relays), an R3 bucket takes
// writes on the majority side and none on the isolated node, and a healed
// node has its routes again.
func TestPartitionIsolatesANode(t *testing.T) {
	c := PartitionCluster(t, 3)
	nc, err := nats.Connect(c.URL(0), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	minority, err := nats.Connect(c.URL(2), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer minority.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "p", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	c.Isolate(2)
	for i, want := range []int{1, 1, 0} {
		if got := c.Nodes[i].NumRemotes(); got != want {
			t.Fatalf("node %d has %d routes, want %d", i, got, want)
		}
	}
	WaitFor(t, 15*time.Second, func() (bool, string) {
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		defer wcancel()
		_, err := kv.PutString(wctx, "k", "v")
		return err == nil, "majority write: " + errString(err)
	})
	mjs, _ := jetstream.New(minority)
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if mkv, err := mjs.KeyValue(wctx, "p"); err == nil {
		if _, err := mkv.PutString(wctx, "k", "minority"); err == nil {
			t.Fatal("a write on the isolated node succeeded")
		}
	}
	c.Heal(2)
	if got := c.Nodes[2].NumRemotes(); got != 2 {
		t.Fatalf("healed node has %d routes, want 2", got)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
