package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestCLIAgents: `mcpbus agents create|list|revoke` against mcpbus up as its
// own process: the agent connects with the seed file and inbox prefix it was
// given, may list tools, may not touch configs, and is cut off when revoked.
func TestCLIAgents(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin
	dir := t.TempDir()
	url := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data")).NATSURL()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "status")
		return r.Code == 0, r.String()
	})

	r := cli(t, bin, url, "agents", "create", "demo", "--allow-tool", "everything__*", "--json")
	var agent model.Agent
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &agent) != nil {
		t.Fatalf("agents create: %s", r)
	}
	if !filepath.IsAbs(agent.SeedFile) || agent.InboxPrefix != "_I.agent-demo" ||
		agent.SubjectPrefix != "mcp.v1.agent.demo" ||
		!slices.Equal(agent.Subjects, []string{"mcp.v1.agent.demo.tools.list", "mcp.v1.agent.demo.tools.search", "_I.*.answers.>", "mcp.v1.agent.demo.call.everything.*", "mcp.v1.agent.demo.rpc.everything", "mcp.v1.agent.demo.cancel.everything"}) {
		t.Fatalf("agent %+v", agent)
	}
	if st, err := os.Stat(agent.SeedFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v %v", st, err)
	}
	if r := cli(t, bin, url, "agents", "create", "demo"); r.Code == 0 {
		t.Fatalf("a second agent of the same name: %s", r)
	}
	if r := cli(t, bin, url, "agents", "list"); r.Code != 0 || !slices.Contains(strings.Fields(r.Stdout), "demo") {
		t.Fatalf("agents list: %s", r)
	}

	seed, err := nats.NkeyOptionFromSeed(agent.SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 8)
	closed := make(chan struct{})
	nc, err := nats.Connect(url, seed, nats.CustomInboxPrefix(agent.InboxPrefix), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request("mcp.v1.agent.demo.tools.list", []byte(`{}`), 5*time.Second); err != nil {
		t.Fatalf("the agent may list tools: %v", err)
	}
	if _, err := nc.Request("mcp.v1.config.list", []byte(`{}`), 500*time.Millisecond); err == nil {
		t.Fatal("the agent listed configs")
	}
	select {
	case err := <-violations:
		t.Logf("refused as expected: %v", err)
	case <-time.After(2 * time.Second):
		t.Fatal("no permission violation for config.list")
	}

	if r := cli(t, bin, url, "agents", "revoke", "demo"); r.Code != 0 {
		t.Fatalf("agents revoke: %s", r)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked agent's connection stayed open")
	}
	if r := cli(t, bin, url, "agents", "list"); r.Code != 0 || slices.Contains(strings.Fields(r.Stdout), "demo") {
		t.Fatalf("agents list after revoke: %s", r)
	}
}
