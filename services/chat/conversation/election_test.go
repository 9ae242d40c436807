package conversation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	mcpbus "github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
)

// TestLogRidesOutALeaderElection: the node leading the R3 chat stream stops;
// an append, a conditional append and a read sent at once succeed within
// the caller's deadline (the stream has no leader for a few seconds: a turn
// failed with NETWORK_ERROR "JetStream did not answer" meanwhile), and the
// retried append is stored once.
func TestLogRidesOutALeaderElection(t *testing.T) {
	c := testkit.Cluster(t, 3)
	// Not to n3, whose stop the test is about.
	nc, err := nats.Connect(c.URL(0)+","+c.URL(1), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
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
	l, err := conversation.Open(ctx, js, conversation.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	const conv = "c1"
	if _, err := l.Append(ctx, conv, model.ChatEntry{Kind: model.EntryUserMessage, Turn: "t1"}); err != nil {
		t.Fatal(err)
	}
	_, tail, err := l.ReadTail(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	const leader = 2
	testkit.LeadOn(t, nc, c, mcpbus.StreamChat, "n3")
	c.StopNode(leader)
	start := time.Now()
	// A turn's deadline: the writes wait for the new leader within it.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if _, err := l.Append(wctx, conv, model.ChatEntry{Kind: model.EntryModelStep, Turn: "t1"}); err != nil {
		t.Fatalf("append %s after the leader stopped: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("append answered %s after n%d (the leader) stopped", time.Since(start).Round(time.Millisecond), leader+1)
	entries, tail2, err := l.ReadTail(wctx, conv)
	if err != nil {
		t.Fatalf("read after the leader stopped: %v", err)
	}
	if len(entries) != 2 || tail2.Seq != tail.Seq+1 {
		t.Fatalf("read %d entries (tail %+v), want 2", len(entries), tail2)
	}
	if _, _, err := l.AppendAfter(wctx, conv, tail2, model.ChatEntry{Kind: model.EntryModelStep, Turn: "t1"}); err != nil {
		t.Fatalf("append after: %v", err)
	}
}

// TestReadEndsByItsDeadlineInAPartition: the node leading the JetStream
// meta group (which creates consumers) is cut off from the others, the
// chat stream led on the majority side; a read with a 3 s deadline ends by
// then (with an error, or the entries if the new meta leader came first).
// Before, its ordered consumer's Fetch created the consumer with nats.go's
// own retries, endless and deaf to the deadline: the read waited for the
// new meta leader (a chat send waited out its caller's 20 s in one run of
// eight).
func TestReadEndsByItsDeadlineInAPartition(t *testing.T) {
	c := testkit.PartitionCluster(t, 3)
	meta := c.MetaLeader()
	var urls []string
	for i := range c.Nodes {
		if i != meta {
			urls = append(urls, c.URL(i))
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
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
	l, err := conversation.Open(ctx, js, conversation.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "c1", model.ChatEntry{Kind: model.EntryUserMessage, Turn: "t1"}); err != nil {
		t.Fatal(err)
	}
	testkit.LeadOn(t, nc, c.Cluster, mcpbus.StreamChat, c.Nodes[(meta+1)%3].Name())
	if c.MetaLeader() != meta {
		t.Skip("the meta leadership moved meanwhile")
	}
	c.Isolate(meta)
	start := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	defer rcancel()
	_, err = l.Read(rctx, "c1")
	took := time.Since(start)
	t.Logf("read ended %s after the partition: %v", took.Round(time.Millisecond), err)
	if took > 4*time.Second {
		t.Fatalf("a read with a 3s deadline took %s", took.Round(time.Millisecond))
	}
}
