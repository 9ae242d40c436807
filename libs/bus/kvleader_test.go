package bus_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestFollowKVAcrossLeaderLoss: the node leading the bucket's stream stops
// while the follower stays connected to another node (no reconnect to
// notice). FollowKV watches again, from a new snapshot, once the stream has
// a new leader, so a change made after the election arrives within seconds
// even when the watch's consumer died with the node, not after the 10–20 s
// nats.go takes to miss its heartbeats (tests/cluster shows that case with a
// SIGKILL).
func TestFollowKVAcrossLeaderLoss(t *testing.T) {
	c := testkit.Cluster(t, 3)
	js0, _ := clusterJS(t, c, 0)
	if _, err := js0.CreateKeyValue(withTimeout(t), jetstream.KeyValueConfig{Bucket: "lead", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	// The leader as the stream reports it and as the nodes see it, once
	// they agree (right after the create it may still move).
	leader := -1
	waitUntil(t, "a settled leader of KV_lead", 10*time.Second, func() bool {
		st, err := js0.Stream(withTimeout(t), "KV_lead")
		if err != nil || st.CachedInfo().Cluster == nil {
			return false
		}
		leader = c.NodeOf(st.CachedInfo().Cluster.Leader)
		return leader >= 0 && c.StreamLeader("KV_lead") == leader
	})
	other := (leader + 1) % 3
	js, nc := clusterJS(t, c, other)
	kv, err := js.KeyValue(withTimeout(t), "lead")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(withTimeout(t), "a", "a1"); err != nil {
		t.Fatal(err)
	}
	f := newFollower()
	runFollow(t, nc, kv, f, bus.KVFollowOptions{LeaderInterval: 100 * time.Millisecond})
	select {
	case <-f.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no first snapshot within 10s")
	}

	time.Sleep(500 * time.Millisecond) // FollowKV has read the leader
	c.StopNode(leader)
	start := time.Now()
	if _, err := bus.RetryKV(kv).PutString(withTimeout(t), "b", "b1"); err != nil {
		t.Fatalf("put after the leader stopped: %v", err)
	}
	written := time.Since(start)
	// The watch starts over on the new leader (whether or not its consumer
	// survived: here the node handed its leaderships over before stopping).
	waitUntil(t, "a snapshot after the new leader", 5*time.Second, func() bool { return f.snapshotCount() >= 2 })
	waitUntil(t, "b after the leader stopped", 5*time.Second, func() bool { return f.stateIs(map[string]string{"a": "a1", "b": "b1"}) })
	t.Logf("n%d (leader) stopped; b written %s later, seen %s later; %d snapshots; new leader n%d",
		leader+1, written.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), f.snapshotCount(), c.StreamLeader("KV_lead")+1)
	if nc.Stats().Reconnects != 0 {
		t.Fatalf("the follower's connection reconnected (%d): the test meant it to stay", nc.Stats().Reconnects)
	}
}

// clusterJS connects to node i alone.
func clusterJS(t *testing.T, c *embednats.Cluster, i int) (jetstream.JetStream, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(c.URL(i), nats.DontRandomize(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, nc
}

// TestFollowKVLeadershipBackAndForth: the bucket's leadership moves to
// another node and back between two reads of the leader. The name read is
// the same, but the leadership is new (a consumer that lived with the
// interim leader may be gone with it): FollowKV watches again.
func TestFollowKVLeadershipBackAndForth(t *testing.T) {
	c := testkit.Cluster(t, 3)
	js0, nc0 := clusterJS(t, c, 0)
	if _, err := js0.CreateKeyValue(withTimeout(t), jetstream.KeyValueConfig{Bucket: "aba", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	leader := -1
	waitUntil(t, "a settled leader of KV_aba", 10*time.Second, func() bool {
		st, err := js0.Stream(withTimeout(t), "KV_aba")
		if err != nil || st.CachedInfo().Cluster == nil {
			return false
		}
		leader = c.NodeOf(st.CachedInfo().Cluster.Leader)
		return leader >= 0 && c.StreamLeader("KV_aba") == leader
	})
	js, nc := clusterJS(t, c, (leader+1)%3)
	kv, err := js.KeyValue(withTimeout(t), "aba")
	if err != nil {
		t.Fatal(err)
	}
	f := newFollower()
	// Reads far enough apart for two moves to fit between them.
	runFollow(t, nc, kv, f, bus.KVFollowOptions{LeaderInterval: 5 * time.Second})
	select {
	case <-f.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no first snapshot within 10s")
	}
	time.Sleep(500 * time.Millisecond) // FollowKV has read the leader
	begin := time.Now()
	moveTo := func(i int) {
		waitUntil(t, fmt.Sprintf("n%d leading KV_aba", i+1), 10*time.Second, func() bool {
			if c.StreamLeader("KV_aba") == i {
				return true
			}
			body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": fmt.Sprintf("n%d", i+1)}})
			_, _ = nc0.Request("$JS.API.STREAM.LEADER.STEPDOWN.KV_aba", body, 2*time.Second)
			time.Sleep(100 * time.Millisecond)
			return false
		})
	}
	moveTo((leader + 2) % 3)
	moveTo(leader)
	t.Logf("n%d → n%d → n%d in %s", leader+1, (leader+2)%3+1, leader+1, time.Since(begin).Round(time.Millisecond))
	waitUntil(t, "a snapshot after the leadership came back", 10*time.Second, func() bool { return f.snapshotCount() >= 2 })
}
