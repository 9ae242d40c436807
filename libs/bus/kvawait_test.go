package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// AwaitKV returns the first value answered accepts (not the ones before),
// ctx's error with the revision last seen, and ErrKVWithdrawn on a delete.
func TestAwaitKV(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(withTimeout(t), jetstream.KeyValueConfig{Bucket: "await"})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := kv.PutString(withTimeout(t), "k", "pending")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = kv.PutString(context.Background(), "k", "answered")
	}()
	isAnswer := func(v []byte) (bool, error) { return string(v) == "answered", nil }
	val, rev, err := bus.AwaitKV(withTimeout(t), kv, "k", isAnswer)
	if err != nil || string(val) != "answered" || rev <= first {
		t.Fatalf("awaited %q rev %d (first %d), %v", val, rev, first, err)
	}

	if _, err := kv.PutString(withTimeout(t), "p", "pending"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, rev, err = bus.AwaitKV(ctx, kv, "p", isAnswer)
	if !errors.Is(err, context.DeadlineExceeded) || rev == 0 {
		t.Fatalf("unanswered: rev %d, %v (want the deadline and the revision seen)", rev, err)
	}

	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = kv.Delete(context.Background(), "p")
	}()
	if _, _, err = bus.AwaitKV(withTimeout(t), kv, "p", isAnswer); !errors.Is(err, bus.ErrKVWithdrawn) {
		t.Fatalf("deleted: %v, want ErrKVWithdrawn", err)
	}
}
