package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// cliWait is how long `mcpbus` waits for an answer (its --timeout default).
const cliWait = 35 * time.Second

// procCluster is a 3-node JetStream cluster of nats-server processes, so a
// node can crash (SIGKILL): an in-process node only shuts down, and hands
// its leaderships over first.
type procCluster struct {
	nodes []*testkit.Proc
	urls  []string
}

func startProcCluster(t *testing.T, n int) *procCluster {
	t.Helper()
	ports := testkit.NewPorts(t)
	client, route := make([]int, n), make([]string, n)
	for i := range n {
		client[i] = ports.Next()
		route[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports.Next())
	}
	c := &procCluster{}
	for i := range n {
		dir := t.TempDir()
		conf := filepath.Join(dir, "nats.conf")
		routePort := strings.TrimPrefix(route[i], "nats-route://127.0.0.1:")
		text := fmt.Sprintf("server_name: n%d\nhost: 127.0.0.1\nport: %d\njetstream { store_dir: %q }\n"+
			"cluster { name: mcpbus, host: 127.0.0.1, port: %s, routes: [%s] }\n",
			i+1, client[i], filepath.Join(dir, "js"), routePort, strings.Join(route, ", "))
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, testkit.StartProc(t, testkit.ProcOptions{Name: fmt.Sprintf("nats n%d", i+1), Bin: natsServerBin, Args: []string{"-c", conf}, Dir: dir}))
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
	}
	return c
}

// urlsBut are the client URLs of every node except skip.
func (c *procCluster) urlsBut(skip int) string {
	var out []string
	for i, u := range c.urls {
		if i != skip {
			out = append(out, u)
		}
	}
	return strings.Join(out, ",")
}

// urlsFrom are the client URLs of every node, node first.
func (c *procCluster) urlsFrom(first int) string {
	return strings.Join(append([]string{c.urls[first]}, strings.Split(c.urlsBut(first), ",")...), ",")
}

// waitReplicated waits until an R3 bucket can be made and dropped.
func waitReplicated(t *testing.T, js jetstream.JetStream, within time.Duration) {
	t.Helper()
	testkit.WaitFor(t, within, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "probe", Replicas: 3, Storage: jetstream.MemoryStorage}); err != nil {
			return false, "R3 bucket: " + err.Error()
		}
		if err := js.DeleteKeyValue(ctx, "probe"); err != nil {
			return false, "dropping the probe: " + err.Error()
		}
		return true, ""
	})
}

// moveLeader asks stream's leader to step down in favour of node name, until
// name leads it.
func moveLeader(t *testing.T, nc *nats.Conn, js jetstream.JetStream, stream, name string) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return false, err.Error()
		}
		ci := st.CachedInfo().Cluster
		if ci != nil && ci.Leader == name {
			return true, ""
		}
		body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": name}})
		_, _ = nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, body)
		time.Sleep(200 * time.Millisecond)
		return false, fmt.Sprintf("%s led by %v", stream, ci)
	})
}

// TestConfigWriteAfterNodeCrash: the node leading the config and slug
// buckets (and the event stream) is SIGKILLed; a config create and an edit
// sent right after succeed within the CLI's wait, though the buckets elect
// new leaders meanwhile (nats-server's election timeout is 4–9s).
func TestConfigWriteAfterNodeCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	const victim = 2 // n3
	c := startProcCluster(t, 3)
	nc, err := nats.Connect(c.urlsBut(victim), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitReplicated(t, js, 30*time.Second)

	// The config service talks to the surviving nodes: what is measured is
	// the buckets' election, not its reconnect.
	dir := t.TempDir()
	svc := testkit.StartProc(t, testkit.ProcOptions{Name: "config", Bin: mcpbusBin, Dir: dir, Args: []string{
		"serve", "config", "--nats", c.urlsBut(victim), "--insecure-bus", "--replicas", "3", "--data-dir", dir, "--log-level", "debug"}})
	svc.WaitLog(t, `"msg":"service ready"`, 30*time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("config service log tail:\n%s", testkit.TailLines(svc.Output(), 40))
		}
	})
	// Its subscriptions reach the other node a moment after it is ready.
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return pingServices(nc)["mcpbus-config"] == 1, "the config service does not answer $SRV.PING"
	})
	cl := client.New(nc, client.Options{Timeout: cliWait})
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	first, err := cl.CreateConfig(ctx, disabled("before"), nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	name := fmt.Sprintf("n%d", victim+1)
	for _, st := range []string{"KV_mcp_configs", "KV_mcp_slugs", "MCP_EVENTS"} {
		moveLeader(t, nc, js, st, name)
	}
	t.Logf("%s leads KV_mcp_configs, KV_mcp_slugs and MCP_EVENTS; SIGKILL", name)
	c.nodes[victim].Kill(t)

	start := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	created, err := cl.CreateConfig(ctx, disabled("after"), nil)
	if err != nil {
		t.Fatalf("create %s after the crash: %v", since(start), err)
	}
	t.Logf("create (reserves slug %q) answered %s after the SIGKILL", created.Slug, since(start))
	edit := first
	edit.Package.Args = []string{"--edited-after-the-crash"}
	begin := time.Now()
	edited, err := cl.UpdateConfig(ctx, edit, nil)
	if err != nil {
		t.Fatalf("update %s after the crash: %v", since(start), err)
	}
	t.Logf("update answered %s later (%s after the SIGKILL)", since(begin), since(start))
	if edited.Revision <= first.Revision || len(edited.Package.Args) != 1 {
		t.Fatalf("update stored %+v, want a new revision with the new args", edited)
	}
	got, err := cl.GetConfig(ctx, "after")
	if err != nil || got.ID != created.ID {
		t.Fatalf("get after = %+v, %v; want the created config %s", got, err, created.ID)
	}
}

// disabled is a disabled config named name (nothing to start).
func disabled(name string) model.McpConfig {
	cfg := runnertest.Binary(name, testServer)
	cfg.Enabled = false
	return cfg
}
