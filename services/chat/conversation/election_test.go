package conversation_test

import (
	"context"
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
