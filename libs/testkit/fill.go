package testkit

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// FillStore fills the NATS server behind js until it refuses writes for
// want of storage (an unbounded KV bucket "fill" of 1 MiB values: a
// stream's reservation does not keep its room once the server is full), and
// returns free, which deletes the bucket so that there is room again.
func FillStore(ctx context.Context, t testing.TB, js jetstream.JetStream) (free func()) {
	t.Helper()
	fill, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fill"})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1<<20)
	for i := 0; ; i++ {
		if _, err := fill.Put(ctx, fmt.Sprint("k", i), val); err != nil {
			if !bus.StoreFull(err) {
				t.Fatalf("filling the NATS server: %v", err)
			}
			break
		}
	}
	return func() {
		t.Helper()
		if err := js.DeleteKeyValue(ctx, "fill"); err != nil {
			t.Fatalf("freeing the NATS server: %v", err)
		}
	}
}
