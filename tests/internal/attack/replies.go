// Package attack holds attacks on the bus that more than one deployment
// layout's tests run.
package attack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RepliesAimedAtBuckets sends, over nc (an identity that may request
// tools.list and read the catalog and status buckets, e.g. the gateway's),
// tools.list requests whose reply subjects are keys of buckets the runner
// may write, and fails t if any was written: the runner must drop a request
// whose reply is not an inbox (no allow_responses; bus.RefuseReply).
func RepliesAimedAtBuckets(t *testing.T, nc *nats.Conn, layout string) {
	t.Helper()
	for _, reply := range []string{"$KV.mcp_tools.evil", "$KV.mcp_status.evil", "$KV.mcp_owners.server.evil.0"} {
		if err := nc.PublishRequest("mcp.v1.tools.list", reply, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a runner has had them
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []string{"mcp_tools", "mcp_status"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Errorf("%s: bucket %s: %v", layout, bucket, err)
		} else if _, err := kv.Get(ctx, "evil"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s: a reply aimed at %s.evil was written (%v)", layout, bucket, err)
		}
		cancel()
	}
}
