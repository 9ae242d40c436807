package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
)

// partitionedTurns is a chat instance and a caller on n1 (n2 after it) of
// a relayed 3-node cluster, conversation c1 with one turn done, and the
// leader of the bucket of turn leases and owners (mcp_chat_turns) on n3,
// cut off from the others just now: its leadership is not handed over, and
// the two others elect a new leader after their election timeout.
func partitionedTurns(t *testing.T) (*env, *follow) {
	t.Helper()
	c := testkit.PartitionCluster(t, 3)
	connect := func() *nats.Conn {
		nc, err := nats.Connect(c.URL(0)+","+c.URL(1), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	e := &env{llm: llmtest.Start(t, ""), nc: connect()}
	e.startServiceOn(t, connect(), 0, Options{Replicas: 3})
	e.putProfile(t, model.Profile{Name: "p", Provider: model.ChatProviderOpenAI, Model: "m", BaseURL: e.llm.OpenAIBaseURL()})
	f := e.follow(t, "c1")
	e.llm.Enqueue(llmtest.Text("before"))
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "c1", Profile: "p", Message: "one"}, &model.ChatSendReply{}); err != nil {
		t.Fatal(err)
	}
	f.done(t, 1, 10*time.Second)
	// The turn's lease is given up after its done event: a release still on
	// its way when n3 is cut off would leave the turn running for a TTL.
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bus.BucketChatTurns)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := kv.Get(ctx, leaseKey("c1"))
		return errors.Is(err, jetstream.ErrKeyNotFound), "the first turn's lease is still held"
	})
	testkit.LeadOn(t, e.nc, c.Cluster, "KV_"+bus.BucketChatTurns, "n3")
	c.Isolate(2)
	return e, f
}

// TestSendRidesOutATurnsElection: a turn sent right after the partition
// runs within the caller's deadline. Before, the send failed at once in 2
// runs of 4 (SERVICE_UNAVAILABLE "reading the owner of conversation c1").
func TestSendRidesOutATurnsElection(t *testing.T) {
	e, f := partitionedTurns(t)
	e.llm.Enqueue(llmtest.Text("after"))
	start := time.Now()
	if err := e.req(t, "send", model.ChatSendRequest{Conversation: "c1", Profile: "p", Message: "two"}, &model.ChatSendReply{}); err != nil {
		t.Fatalf("send %s after the partition: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("send answered %s after the partition", time.Since(start).Round(time.Millisecond))
	if d := f.done(t, 2, 20*time.Second); d.Reason != model.TurnFinal || d.Message != "after" {
		t.Fatalf("done = %+v", d)
	}
}

// TestSendAnswersWithinTheCallersDeadline: a send whose caller waits less
// than the election lasts gets the service's error before it gives up, not
// "no reply" (after which the send might still have gone through). Before,
// the service worked on for its own 30 s.
func TestSendAnswersWithinTheCallersDeadline(t *testing.T) {
	e, _ := partitionedTurns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := bus.RequestJSON(ctx, e.nc, bus.NewSubjects("").Service("chat", "send"),
		model.ChatSendRequest{Conversation: "c1", Profile: "p", Message: "two"}, &model.ChatSendReply{}, 0)
	t.Logf("send answered %s after the partition: %v", time.Since(start).Round(time.Millisecond), err)
	if err != nil && strings.Contains(err.Error(), "no reply on") {
		t.Fatalf("the caller got no answer: %v", err)
	}
}
