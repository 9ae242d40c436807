package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// TestTypeScriptAgent runs docs/examples/agent.mjs (the `nats` npm package, no
// mcpbus code) with node against a running system and checks what it prints.
func TestTypeScriptAgent(t *testing.T) {
	modules := npmModules(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v (the npm packages of `make npm-deps` need it too)", err)
	}
	src := filepath.Join(repoRoot(t), "docs", "examples", "agent.mjs")
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	// ES modules ignore NODE_PATH: they resolve "nats" from the node_modules
	// folders above the script. So the script runs from a temp dir whose
	// node_modules is a link to tests/npm/node_modules.
	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "agent.mjs")
	if err := os.WriteFile(script, code, 0o600); err != nil {
		t.Fatal(err)
	}

	url := everythingURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node agent.mjs: %v\n%s", err, out)
	}
	t.Logf("agent.mjs printed:\n%s", out)
	for _, want := range []string{
		"tool everything__echo -> mcp.v1.call.everything.echo",
		"echo: Echo: hi",
		"error: 404 NOT_FOUND",
		"progress 1/3",
		"long: Long running operation completed",
		"cancel: 504 NETWORK_ERROR",
		"nosuch: no responders",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("agent.mjs output lacks %q", want)
		}
	}
}

// TestAgentsDocMatchesProtocol keeps docs/agents.md in step with the bus: it
// must name every header and subject an agent uses, and point at the example.
func TestAgentsDocMatchesProtocol(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "agents.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := bus.NewSubjects("")
	for _, want := range []string{
		bus.HeaderRequestID, bus.HeaderProgressSubject, bus.HeaderTimeout, bus.HeaderErrorCode, bus.HeaderError,
		s.ToolsList(), s.Call("everything", "echo"), s.Cancel("everything"), s.RPC("everything"),
		"nats req mcp.v1.call.everything.echo", "nats-py", "examples/agent.mjs",
		`"code"`, `"message"`, `"field"`, `"request_id"`,
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/agents.md does not mention %q", want)
		}
	}
}
