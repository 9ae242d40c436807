package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
	"github.com/mcpbus/mcpbus/tests/internal/npmseed"
)

// everythingNPM is the npm package npx runs; the version is the one pinned in
// tests/npm/package.json, so npx finds it in the npm cache `make npm-deps` filled.
const everythingNPM = "@modelcontextprotocol/server-everything@2026.8.31"

// npmModules is tests/npm/node_modules. A missing install fails the test: these
// tests are the proof that real published servers work, so they never skip.
func npmModules(t testing.TB) string {
	t.Helper()
	root := clitest.RepoRoot(t)
	dir := filepath.Join(root, "tests", "npm", "node_modules")
	for _, want := range []string{
		filepath.Join(".bin", "mcp-server-everything"),
		filepath.Join(".bin", "mcp-server-filesystem"),
		filepath.Join("nats", "package.json"),
	} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Fatalf("the pinned npm packages are not installed (%s missing): run `make npm-deps` in %s", filepath.Join(dir, want), root)
		}
	}
	return dir
}

// npmBin is the absolute path of an installed npm binary.
func npmBin(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(npmModules(t), ".bin", name)
}

// startBus runs an embedded NATS server and an in-process runner with short
// stop timeouts. The runner's debug log (server stderr included) is shown if
// the test fails.
func startBus(t *testing.T) *runnertest.Env {
	t.Helper()
	logs := &testkit.LogBuffer{}
	// Registered before runnertest.Start, so it runs after the runner stopped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.Tail(8000))
		}
	})
	return runnertest.Start(t, runner.Options{
		StopGrace:    100 * time.Millisecond,
		StopTimeout:  3 * time.Second,
		StartTimeout: 60 * time.Second, // npx may fetch registry metadata
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
}

// everythingServersFile writes a servers file (YAML) into dir with one
// server, everything, run by the path of its installed binary, and returns
// its path: what `mcpbus up --config` imports.
func everythingServersFile(t *testing.T, dir string) string {
	t.Helper()
	file := filepath.Join(dir, "servers.yaml")
	yaml := fmt.Sprintf("servers:\n  - name: everything\n    enabled: true\n    package: {type: binary, identifier: %q}\n    transport: {type: stdio}\n", npmBin(t, "mcp-server-everything"))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// everythingBin is server-everything run by the path of its installed binary.
func everythingBin(t testing.TB) model.McpConfig {
	return runnertest.Binary("everything", npmBin(t, "mcp-server-everything"))
}

// everythingNpx is server-everything run through `npx -y <package>@<version>`.
func everythingNpx() model.McpConfig {
	return model.McpConfig{
		Name: "everything", Enabled: true,
		// The default npm cache (filled by `make npm-deps`) serves the tarball;
		// --prefer-offline skips the registry round trip when metadata is cached.
		// (npm_config_* variables are refused by the exec policy: npm_config_call
		// is `npx -c`.)
		Package:   model.Package{Type: model.PackageNPM, Identifier: everythingNPM, RuntimeArgs: []string{"--prefer-offline"}},
		Transport: model.Transport{Type: model.TransportStdio},
	}
}

// startEverything runs server-everything by binary path on a fresh bus and
// waits until it is running.
func startEverything(t *testing.T) *runnertest.Env {
	t.Helper()
	e := startBus(t)
	e.Put(t, everythingBin(t))
	e.WaitState(t, "everything", model.StateRunning, 30*time.Second)
	return e
}

// everythingURL is startEverything for tests that talk to the bus with their
// own connection: it returns only the NATS URL.
func everythingURL(t *testing.T) string {
	t.Helper()
	return startEverything(t).NS.ClientURL()
}

// ctxFor is a context that ends after d or with the test.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// toolResult is the part of an MCP CallToolResult the tests read.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

// resultText decodes a CallToolResult and joins its text content.
func resultText(t testing.TB, raw []byte) (string, bool) {
	t.Helper()
	var r toolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("reply is not a CallToolResult: %v: %s", err, raw)
	}
	if len(r.Content) == 0 {
		t.Fatalf("CallToolResult without content: %s", raw)
	}
	var texts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return strings.Join(texts, "\n"), r.IsError
}

// call calls a tool through the Go client and returns its text; a tool
// error (isError) fails the test.
func call(t *testing.T, e *runnertest.Env, server, tool, args string) string {
	t.Helper()
	raw, err := e.Client.Call(ctxFor(t, 20*time.Second), server, tool, json.RawMessage(args), nil)
	if err != nil {
		t.Fatalf("call %s.%s %s: %v", server, tool, args, err)
	}
	text, isErr := resultText(t, raw)
	if isErr {
		t.Fatalf("call %s.%s %s: tool error: %s", server, tool, args, text)
	}
	return text
}

// schema is the part of a JSON Schema the tests read.
type schema struct {
	Type       string                     `json:"type"`
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
}

// checkSchema asserts that a tool's input schema is an object with props.
func checkSchema(t *testing.T, tool model.Tool, props ...string) {
	t.Helper()
	var s schema
	if err := json.Unmarshal(tool.InputSchema, &s); err != nil {
		t.Fatalf("tool %s: input schema is not JSON Schema: %v: %s", tool.Name, err, tool.InputSchema)
	}
	if s.Type != "object" {
		t.Errorf("tool %s: input schema type %q, want object", tool.Name, s.Type)
	}
	for _, p := range props {
		if _, ok := s.Properties[p]; !ok {
			t.Errorf("tool %s: input schema has no property %q: %s", tool.Name, p, tool.InputSchema)
		}
	}
}

// groupMembers lists the live (non-zombie) processes of process group pgid.
func groupMembers(pgid int) []int {
	if pgid <= 0 {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid is a live process (a zombie counts as dead).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// waitGroupGone waits until no process of group pgid (the server's leader pid)
// is alive.
func waitGroupGone(t *testing.T, pgid int, within time.Duration) {
	t.Helper()
	testkit.WaitFor(t, within, func() (bool, string) {
		left := groupMembers(pgid)
		return len(left) == 0 && !alive(pgid), fmt.Sprintf("process group %d still has %v", pgid, left)
	})
}

// everythingNpxSeeded is everythingNpx with an id, whose own npm cache (the
// runner gives every server one, under $npm_config_cache or ~/.npm) is
// seeded with hard links to the shared cache `make npm-deps` filled: npx
// then installs offline, as it did from the shared cache before servers got
// caches of their own, instead of downloading 54 MB in every run. For a
// runner of this process's uid only (a uid switch gets its own cache).
func everythingNpxSeeded(t *testing.T) model.McpConfig {
	t.Helper()
	cfg := everythingNpx()
	cfg.ID = uuid.NewString()
	npmseed.Place(t, model.Slugify(cfg.Name), cfg.ID)
	return cfg
}
