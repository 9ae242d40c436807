package e2e

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// TestTypeScriptAgent runs docs/examples/agent.mjs (the `nats` npm package, no
// mcpbus code) with node against a running system and checks what it prints.
func TestTypeScriptAgent(t *testing.T) {
	t.Parallel()
	runAgentScript(t, everythingURL(t), "mcp.v1", "nosuch: no responders")
}

// runAgentScript runs docs/examples/agent.mjs against url with env added and
// checks what it prints; prefix is where its requests go (mcp.v1, or an
// agent's mcp.v1.agent.<name>).
func runAgentScript(t *testing.T, url, prefix, noSuch string, env ...string) {
	t.Helper()
	modules := npmModules(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v (the npm packages of `make npm-deps` need it too)", err)
	}
	dir, script := agentScript(t, modules)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NATS_URL="+url), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node agent.mjs: %v\n%s", err, out)
	}
	t.Logf("agent.mjs printed:\n%s", out)
	for _, want := range []string{
		"tool everything__echo -> " + prefix + ".call.everything.echo",
		"echo: Echo: hi",
		"error: 404 NOT_FOUND",
		"progress 1/3",
		"long: Long running operation completed",
		"cancel: 504 NETWORK_ERROR",
		noSuch,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("agent.mjs output lacks %q", want)
		}
	}
}

// agentScript copies docs/examples/agent.mjs into a temp dir. ES modules
// ignore NODE_PATH: they resolve "nats" from the node_modules folders above
// the script, so the dir's node_modules is a link to tests/npm/node_modules.
func agentScript(t *testing.T, modules string) (dir, script string) {
	t.Helper()
	code, err := os.ReadFile(filepath.Join(clitest.RepoRoot(t), "docs", "examples", "agent.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "agent.mjs")
	if err := os.WriteFile(script, code, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, script
}

// TestAgentExampleTypeChecks holds agent.mjs to its word: it type-checks as
// TypeScript (strict, the nats and node types pinned in tests/npm), with the
// command its header gives.
func TestAgentExampleTypeChecks(t *testing.T) {
	t.Parallel()
	modules := npmModules(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	dir, script := agentScript(t, modules)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(modules, "typescript", "bin", "tsc"),
		"--noEmit", "--checkJs", "--allowJs", "--strict", "--module", "nodenext", "--target", "es2022", "--types", "node", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc --checkJs agent.mjs: %v\n%s", err, out)
	}
}

// TestAgentsDocMatchesProtocol keeps docs/agents.md in step with the bus: it
// must name every header and subject an agent uses, and point at the example.
func TestAgentsDocMatchesProtocol(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(clitest.RepoRoot(t), "docs", "agents.md"))
	if err != nil {
		t.Fatal(err)
	}
	a := bus.NewSubjects("").ForAgent("demo")
	for _, want := range []string{
		bus.HeaderRequestID, bus.HeaderProgressSubject, bus.HeaderTimeout, bus.HeaderErrorCode, bus.HeaderError,
		a.ToolsList(), a.Call("everything", "echo"), a.Cancel("everything"), a.RPC("everything"),
		"nats req mcp.v1.agent.demo.call.everything.echo", "nats-py", "examples/agent.mjs", "MCP_PREFIX", bus.AnswersToken,
		`"code"`, `"message"`, `"field"`, `"request_id"`,
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/agents.md does not mention %q", want)
		}
	}
}

// TestTypeScriptAgentWithIdentity runs the same script against mcpbus up's
// authenticated bus as an agent identity (`mcpbus agents create`): its nkey
// seed file and its own inbox prefix, as docs/agents.md shows.
func TestTypeScriptAgentWithIdentity(t *testing.T) {
	t.Parallel()
	logs := &testkit.LogBuffer{}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), NATSPort: -1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Runner: runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if t.Failed() {
			t.Logf("log tail:\n%s", logs.Tail(6000))
		}
	})
	cfg := everythingBin(t)
	cfg.Runtime.Eager = true
	if _, err := st.Client.CreateConfig(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	for {
		if s, err := st.Client.Runtime(ctx, "status", "everything"); err == nil && s.State == model.StateRunning {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("everything is not running")
		}
		time.Sleep(100 * time.Millisecond)
	}
	agent, err := st.AddAgent("ts", []string{"everything__*"}) // as docs/agents.md makes "demo"
	if err != nil {
		t.Fatal(err)
	}
	runAgentScript(t, st.NATS.ClientURL(), agent.SubjectPrefix, "nosuch: not allowed for this agent", "NATS_NKEY="+agent.SeedFile, "NATS_INBOX_PREFIX="+agent.InboxPrefix, "MCP_PREFIX="+agent.SubjectPrefix)
}
