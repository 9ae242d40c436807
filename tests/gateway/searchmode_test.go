package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// searchScript drives /mcp?tools=search with the official TypeScript SDK
// (v1, a session): it lists the tools, searches, and calls a found tool
// through call_tool.
const searchScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const [url, key] = process.argv.slice(2);
const client = new Client({ name: "search-test", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "Bearer " + key } } }));
const listed = (await client.listTools()).tools.map((t) => t.name).sort();
const res = await client.callTool({ name: "search_tools", arguments: { query: "echo a message back", limit: 3 } });
const found = JSON.parse(res.content[0].text).tools;
const echo = await client.callTool({ name: "call_tool", arguments: { name: found[0].name, arguments: { message: "found and called" } } });
console.log(JSON.stringify({ listed, found: found.map((t) => t.name), schema: !!found[0].inputSchema, echo: echo.content[0].text }));
await client.close();
`

// TestSearchModeClients: /mcp?tools=search of a real `mcpbus up` with the
// TypeScript SDK (a session of 2025-11-25) and the Inspector's CLI in its
// modern era (2026-07-28, no session): two tools, and a found tool called;
// the same on plain /mcp with a key made --tools-mode search (its pinned
// tool listed too) and from serve-stdio --tools search.
func TestSearchModeClients(t *testing.T) {
	t.Parallel()
	inspector := npmBin(t, "mcp-inspector")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	bin := mcpbusBin
	up := startUpGateway(t, bin, "alpha")
	key := up.adminKey(t)
	url := up.httpURL + "/mcp?tools=search"

	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "search.mjs")
	if err := os.WriteFile(script, []byte(searchScript), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctxT(t, 60*time.Second), node, script, url, key).CombinedOutput()
	if err != nil {
		t.Fatalf("node search.mjs: %v\n%s", err, out)
	}
	var got struct {
		Listed, Found []string
		Schema        bool
		Echo          string
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if json.Unmarshal([]byte(lines[len(lines)-1]), &got) != nil {
		t.Fatalf("search.mjs printed:\n%s", out)
	}
	if !slices.Equal(got.Listed, []string{"call_tool", "search_tools"}) || len(got.Found) == 0 || got.Found[0] != "alpha__echo" ||
		!got.Schema || got.Echo != "found and called" {
		t.Fatalf("the TypeScript SDK in search mode: %+v", got)
	}

	// A key made with --tools-mode search: plain /mcp is search mode, its
	// pinned tool listed beside the two.
	r := up.runCLI(t, "--json", "keys", "create", "searcher", "--tools-mode", "search", "--pin-tool", "alpha__env")
	var searcher model.KeyCreateReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &searcher) != nil || searcher.ToolsMode != "search" {
		t.Fatalf("keys create --tools-mode search: %s", r)
	}
	out, err = exec.CommandContext(ctxT(t, 60*time.Second), node, script, up.httpURL+"/mcp", searcher.Key).CombinedOutput()
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	got.Listed = nil
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &got) != nil {
		t.Fatalf("node search.mjs as the search-mode key: %v\n%s", err, out)
	}
	if !slices.Equal(got.Listed, []string{"alpha__env", "call_tool", "search_tools"}) || got.Echo != "found and called" {
		t.Fatalf("the TypeScript SDK on /mcp with a search-mode key: %+v", got)
	}

	// serve-stdio --tools search: the same tools over stdio.
	cmd := up.CLI().Command(context.Background(), "serve-stdio", "--tools", "search", "--pin-tool", "alpha__env")
	stderr := &testkit.LogBuffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-search", Version: "1"}, nil).
		Connect(ctxT(t, 60*time.Second), &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatalf("serve-stdio --tools search: %v\n%s", err, stderr.String())
	}
	defer func() { _ = cs.Close() }()
	if names := sortedNames(listTools(t, cs)); !slices.Equal(names, []string{"alpha__env", "call_tool", "search_tools"}) {
		t.Fatalf("serve-stdio --tools search lists %v", names)
	}
	if text := callText(t, cs, "call_tool", map[string]any{"name": "alpha__echo", "arguments": map[string]any{"message": "stdio search"}}); text != "stdio search" {
		t.Fatalf("call_tool over serve-stdio --tools search: %q", text)
	}

	home := t.TempDir()
	inspect := func(args ...string) map[string]json.RawMessage {
		t.Helper()
		args = append([]string{"--cli", "-q", "--protocol-era", "modern", "--format", "json", "--connect-timeout", "30000",
			"--server-url", url, "--header", "Authorization: Bearer " + key}, args...)
		cmd := exec.CommandContext(ctxT(t, 90*time.Second), inspector, args...)
		cmd.Env = clitest.Env("HOME="+home, "MCP_INSPECTOR_SECRET_STORE=memory")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("inspector %v: %v\n%s\n%s", args[12:], err, stdout.String(), stderr.String())
		}
		var res map[string]json.RawMessage
		if json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res) != nil {
			t.Fatalf("inspector %v printed %s", args[12:], stdout.String())
		}
		return res
	}
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if res := inspect("--method", "tools/list"); json.Unmarshal(res["result"], &list) != nil || len(list.Tools) != 2 {
		t.Fatalf("modern tools/list in search mode: %s", res["result"])
	}
	var call struct {
		Content []struct{ Text string } `json:"content"`
	}
	res := inspect("--method", "tools/call", "--tool-name", "call_tool", "--tool-args-json", `{"name":"alpha__echo","arguments":{"message":"modern"}}`)
	if json.Unmarshal(res["result"], &call) != nil || len(call.Content) != 1 || call.Content[0].Text != "modern" {
		t.Fatalf("modern call_tool: %s", res["result"])
	}
}
