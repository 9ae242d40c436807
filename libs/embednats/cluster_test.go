package embednats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/embednats"
)

// TestCluster: three nodes form a JetStream cluster; an R3 bucket written on
// one node reads on another; with a node down a client of all nodes still
// writes and reads; the node restarts and catches up.
func TestCluster(t *testing.T) {
	start := time.Now()
	c, err := embednats.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	t.Logf("cluster formed in %s", time.Since(start).Round(time.Millisecond))
	if got := strings.Count(c.URLs(), ",") + 1; got != 3 {
		t.Fatalf("URLs() = %q, want 3", c.URLs())
	}
	for i, s := range c.Nodes {
		if want := "n" + string(rune('1'+i)); s.Name() != want {
			t.Errorf("node %d named %q, want %q", i, s.Name(), want)
		}
		if !s.JetStreamIsClustered() {
			t.Errorf("node %d: JetStream not clustered", i)
		}
	}

	js1 := jsOn(t, c.Nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv1, err := js1.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "r3", Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv1.PutString(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	js3 := jsOn(t, c.Nodes[2])
	kv3, err := js3.KeyValue(ctx, "r3")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := kv3.Status(ctx); err != nil || info.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
		t.Fatalf("bucket status %v, %v: want 3 replicas", info, err)
	}
	waitValue(t, kv3, "k", "v1", 2*time.Second)

	// A client of all nodes, on node 1 first, through the loss of node 1.
	nc, err := nats.Connect(c.URLsFrom(0), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if nc.ConnectedUrl() != c.URL(0) {
		t.Fatalf("connected to %s, want node 1 %s", nc.ConnectedUrl(), c.URL(0))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "r3")
	if err != nil {
		t.Fatal(err)
	}
	// The worst case: node 1 leads the bucket's stream.
	leadOn(t, nc, c, "KV_r3", 0)
	t.Logf("before the stop: meta leader n%d, KV_r3 leader n%d", c.MetaLeader()+1, c.StreamLeader("KV_r3")+1)
	stopped := time.Now()
	c.StopNode(0)
	t.Logf("node 1 stopped in %s", time.Since(stopped).Round(time.Millisecond))
	if c.Alive(0) || strings.Contains(c.URLs(), c.URL(0)) || strings.Count(c.URLs(), ",") != 1 {
		t.Fatalf("after StopNode(0): alive %v, URLs %q", c.Alive(0), c.URLs())
	}
	var lastErr error
	for {
		if time.Since(stopped) > 10*time.Second {
			t.Fatalf("R3 bucket not writable 10s after losing node 1: %v", lastErr)
		}
		lastErr = putGet(kv, "k", "v2")
		if lastErr == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("R3 bucket writable again %s after node 1 stopped (client on %s, meta leader n%d, KV_r3 leader n%d)",
		time.Since(stopped).Round(time.Millisecond), nc.ConnectedUrl(), c.MetaLeader()+1, c.StreamLeader("KV_r3")+1)

	restarted := time.Now()
	if err := c.RestartNode(0); err != nil {
		t.Fatal(err)
	}
	t.Logf("node 1 rejoined in %s", time.Since(restarted).Round(time.Millisecond))
	if !c.Alive(0) || strings.Count(c.URLs(), ",") != 2 || c.Nodes[0].ClientURL() != c.URL(0) {
		t.Fatalf("after RestartNode(0): alive %v, URLs %q, node 1 at %s want %s", c.Alive(0), c.URLs(), c.Nodes[0].ClientURL(), c.URL(0))
	}
	// The restarted node serves the bucket, with the write it missed. Until it
	// has caught up with the meta leader a JetStream API request to it may get
	// no answer at all (CI once waited out the whole budget on one), so each
	// try is short.
	js1 = jsOn(t, c.Nodes[0])
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		try, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		kv1, err = js1.KeyValue(try, "r3")
		return err == nil, fmt.Sprint("bucket r3 on the rejoined node 1: ", err)
	})
	waitValue(t, kv1, "k", "v2", 5*time.Second)
	if err := c.WaitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

func TestRestartNodeErrors(t *testing.T) {
	c, err := embednats.StartCluster(1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if err := c.RestartNode(0); err == nil {
		t.Fatal("restarting a running node: no error")
	}
	if err := c.RestartNode(5); err == nil {
		t.Fatal("restarting node 5 of 1: no error")
	}
	c.StopNode(0)
	c.StopNode(0) // twice is fine
	if c.URLs() != "" {
		t.Fatalf("URLs() = %q with no node running", c.URLs())
	}
	if err := c.RestartNode(0); err != nil {
		t.Fatal(err)
	}
}

// TestStartStandalone keeps the single-server API as it was.
func TestStartStandalone(t *testing.T) {
	s := testkit.NATS(t)
	for _, connect := range []func(...nats.Option) (*nats.Conn, error){s.Connect, s.ConnectTCP} {
		nc, err := connect()
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := js.AccountInfo(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		nc.Close()
	}
	// Its port is taken now: a second server on it fails at once.
	began := time.Now()
	if _, err := embednats.Start(embednats.Options{Port: s.Options().Port, StoreDir: t.TempDir()}); err == nil {
		t.Fatal("second server on a taken port: no error")
	} else if time.Since(began) > 2*time.Second {
		t.Fatalf("port clash reported after %s: %v", time.Since(began), err)
	}
}

// leadOn makes node i the leader of stream.
func leadOn(t *testing.T, nc *nats.Conn, c *embednats.Cluster, stream string, i int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.StreamLeader(stream) != i {
		if time.Now().After(deadline) {
			t.Fatalf("stream %s led by node %d, want %d", stream, c.StreamLeader(stream), i)
		}
		if c.StreamLeader(stream) >= 0 {
			req := fmt.Sprintf(`{"placement":{"preferred":"n%d"}}`, i+1)
			if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(req), time.Second); err != nil {
				t.Logf("stepdown: %v", err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jsOn(t *testing.T, s *embednats.Server) jetstream.JetStream {
	t.Helper()
	nc, err := s.ConnectTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func putGet(kv jetstream.KeyValue, key, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := kv.PutString(ctx, key, value); err != nil {
		return err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return err
	}
	if string(e.Value()) != value {
		return errors.New("read " + string(e.Value()) + ", want " + value)
	}
	return nil
}

// waitValue polls: a replica answering a direct get may lag the leader a little.
func waitValue(t *testing.T, kv jetstream.KeyValue, key, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		e, err := kv.Get(ctx, key)
		cancel()
		if err == nil && string(e.Value()) == want {
			return
		}
		if time.Now().After(deadline) {
			if err == nil {
				t.Fatalf("%s = %q, want %q after %s", key, e.Value(), want, within)
			}
			t.Fatalf("%s: %v, want %q after %s", key, err, want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
