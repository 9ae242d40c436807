package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestServicesStartTogether: every service, started at the same instant as
// a fresh 3-node cluster (before it has elected JetStream leaders, as with
// `docker compose up`), comes up, and none exits; several rounds.
func TestServicesStartTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and six processes per round")
	}
	for round := range 3 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) { startTogether(t) })
	}
}

func startTogether(t *testing.T) {
	c, err := embednats.StartClusterUnready(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	services := []struct{ name, args string }{
		{"credential", ""}, {"config", ""}, {"registry", ""},
		{"runner", "--runner-id ra"}, {"runner", "--runner-id rb"},
		{"gateway", "--http-addr 127.0.0.1:0"},
	}
	var procs []*testkit.Proc
	// Registered before any process starts, so it runs after they all ended.
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("STARTUP_LOGS") != "" {
			for _, p := range procs {
				t.Logf("%s log tail:\n%s", p.Name(), testkit.TailLines(p.Output(), 30))
			}
		}
	})
	for i, s := range services {
		dir := t.TempDir()
		args := []string{"serve", s.name, "--nats", c.URLsFrom(i % 3), "--replicas", "3",
			"--data-dir", dir, "--log-level", "debug"}
		args = append(args, strings.Fields(s.args)...)
		procs = append(procs, testkit.StartProc(t, testkit.ProcOptions{Name: s.name + " " + s.args, Bin: mcpbusBin, Args: args, Dir: dir}))
	}

	nc, err := c.Connect(nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	want := map[string]int{"mcpbus-credential": 1, "mcpbus-config": 1, "mcpbus-registry": 1, "mcpbus-runner": 2, "mcpbus-gateway": 1}
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, p := range procs {
			if p.Exited() {
				t.Fatalf("%s exited during start-up: %v", p.Name(), p.Err())
			}
		}
		got := pingServices(nc)
		missing := []string{}
		for name, n := range want {
			if got[name] < n {
				missing = append(missing, fmt.Sprintf("%s %d/%d", name, got[name], n))
			}
		}
		if len(missing) == 0 {
			t.Logf("all up in %s", time.Since(deadline.Add(-60*time.Second)).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not up after 60s: %v", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Up and staying up.
	time.Sleep(2 * time.Second)
	for _, p := range procs {
		if p.Exited() {
			t.Fatalf("%s exited after start-up: %v", p.Name(), p.Err())
		}
	}
	// A graceful stop of every one: exit code 0.
	testkit.StopAll(t, procs, 20*time.Second)
}

// pingServices counts the micro services answering $SRV.PING within 300ms, by name.
func pingServices(nc *nats.Conn) map[string]int {
	inbox := nats.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.PING", inbox, nil); err != nil {
		return nil
	}
	got := map[string]int{}
	timeout := time.After(300 * time.Millisecond)
	for {
		select {
		case m := <-ch:
			var ping struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(bytes.TrimSpace(m.Data), &ping) == nil {
				got[ping.Name]++
			}
		case <-timeout:
			return got
		}
	}
}
