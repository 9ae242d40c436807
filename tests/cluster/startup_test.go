package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/embednats"
)

// servedProc is one `mcpbus serve <service>` process.
type servedProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (p *servedProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *servedProc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

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
	var procs []*servedProc
	for i, s := range services {
		dir := t.TempDir()
		args := []string{"serve", s.name, "--nats", c.URLsFrom(i % 3), "--replicas", "3",
			"--data-dir", dir, "--log-level", "debug"}
		args = append(args, strings.Fields(s.args)...)
		cmd := exec.Command(mcpbusBin, args...)
		logPath := filepath.Join(dir, "log")
		f, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &servedProc{name: s.name + " " + s.args, cmd: cmd, log: logPath, done: make(chan struct{})}
		go func() { p.err = cmd.Wait(); _ = f.Close(); close(p.done) }()
		procs = append(procs, p)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if !p.exited() {
				_ = p.cmd.Process.Kill()
				<-p.done
			}
			if t.Failed() || os.Getenv("STARTUP_LOGS") != "" {
				t.Logf("%s log tail:\n%s", p.name, p.tail())
			}
		}
	})

	nc, err := c.Connect(nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	want := map[string]int{"mcpbus-credential": 1, "mcpbus-config": 1, "mcpbus-registry": 1, "mcpbus-runner": 2, "mcpbus-gateway": 1}
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("%s exited during start-up: %v", p.name, p.err)
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
		if p.exited() {
			t.Fatalf("%s exited after start-up: %v", p.name, p.err)
		}
	}
	// A graceful stop of every one: exit code 0.
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
			if p.err != nil {
				t.Errorf("%s: exit after SIGTERM: %v", p.name, p.err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not stop within 20s of SIGTERM", p.name)
		}
	}
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
