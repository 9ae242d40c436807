package client_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestFollowEventsLosesItsNode: the node holding a follower's ordered
// consumer (not the follower's node, nor the events stream's leader) is cut
// off before any event came; nats.go recreates the consumer once its
// heartbeats stop, and every event stored meanwhile is delivered. Before,
// the recreated consumer delivered only what was new by then: `mcpbus
// events` silently missed the events of the ~10 s before.
func TestFollowEventsLosesItsNode(t *testing.T) {
	c := testkit.PartitionCluster(t, 3)
	nc, err := nats.Connect(c.URL(0), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subj := bus.NewSubjects("")
	if _, err := bus.EnsureAssets(ctx, js, subj, bus.AssetOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	testkit.LeadOn(t, nc, c.Cluster, bus.StreamEvents, "n1")
	var mu sync.Mutex
	var got []string
	// An R1 consumer lands on a random node of the stream's: follow until
	// it is on n2 or n3.
	held := -1
	for try := 0; held < 1; try++ {
		if try == 20 {
			t.Fatal("the consumer never landed off n1")
		}
		fctx, fcancel := context.WithCancel(ctx)
		defer fcancel()
		go func() {
			_ = client.New(nc, client.Options{}).FollowEvents(fctx, "", false, func(ev client.Event) {
				mu.Lock()
				got = append(got, string(ev.Data))
				mu.Unlock()
			})
		}()
		var info *jetstream.ConsumerInfo
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			st, err := js.Stream(ctx, bus.StreamEvents)
			if err != nil {
				return false, err.Error()
			}
			for ci := range st.ListConsumers(ctx).Info() {
				info = ci
			}
			return info != nil, "no consumer yet"
		})
		if held = c.NodeOf(info.Cluster.Leader); held < 1 {
			fcancel()
			_ = js.DeleteConsumer(ctx, bus.StreamEvents, info.Name)
			info = nil
		}
	}
	c.Isolate(held)
	start := time.Now()
	var stored []string
	for i := 0; ; i++ {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		data := fmt.Sprint(i)
		if _, err := js.Publish(pctx, subj.Event("status", "s1"), []byte(data)); err == nil {
			stored = append(stored, data)
		}
		pcancel()
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("no event delivered 30s after the consumer's node was cut off (%d stored)", len(stored))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("events delivered again %s after the partition", time.Since(start).Round(time.Millisecond))
	testkit.WaitFor(t, 5*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range stored {
			if !slices.Contains(got, s) {
				return false, fmt.Sprintf("stored %v, delivered %v", stored, got)
			}
		}
		return true, ""
	})
}
