package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestMCPInspectorCLI points the MCP Inspector's CLI (pinned in tests/npm)
// at the /mcp of a real `mcpbus up`, as a new user would, in both of its
// protocol eras: "modern" (2026-07-28, no session: the call's result carries
// the gateway's serverInfo in _meta, which only that protocol has) and
// "legacy" (initialize and a session). It lists the tools, calls one, and
// sees a schema mismatch come back as a tool error (isError) with the
// gateway's message; it reads a resource and gets a prompt (in modern mode
// their results must carry resultType).
func TestMCPInspectorCLI(t *testing.T) {
	t.Parallel()
	inspector := npmBin(t, "mcp-inspector")
	bin := mcpbusBin
	up := startUpGateway(t, bin, "alpha")
	key := up.adminKey(t)
	home := t.TempDir()

	// run runs one Inspector CLI command and returns its exit code and the
	// JSON object it printed (on stdout, or on stderr for a failure).
	run := func(t *testing.T, era string, args ...string) (int, map[string]json.RawMessage) {
		t.Helper()
		args = append([]string{"--cli", "-q", "--protocol-era", era, "--format", "json", "--connect-timeout", "30000",
			"--server-url", up.httpURL + "/mcp", "--header", "Authorization: Bearer " + key}, args...)
		cmd := exec.CommandContext(ctxT(t, 90*time.Second), inspector, args...)
		// No keychain or home of the machine's: a fresh home, secrets in memory.
		cmd.Env = clitest.Env("HOME="+home, "MCP_INSPECTOR_SECRET_STORE=memory")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("running the Inspector: %v\nstderr: %s", err, stderr.String())
		}
		var out map[string]json.RawMessage
		if json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out) != nil {
			t.Fatalf("inspector %s: exit %d, stdout is not one JSON object:\n%s\nstderr: %s", strings.Join(args[12:], " "), code, stdout.String(), stderr.String())
		}
		return code, out
	}
	type callResult struct {
		Meta    map[string]struct{ Name string } `json:"_meta"`
		Content []struct{ Text string }          `json:"content"`
		IsError bool                             `json:"isError"`
	}

	for _, era := range []string{"modern", "legacy"} {
		t.Run(era, func(t *testing.T) {
			code, out := run(t, era, "--method", "tools/list")
			var list struct {
				Tools []struct{ Name string } `json:"tools"`
			}
			if code != 0 || json.Unmarshal(out["result"], &list) != nil {
				t.Fatalf("tools/list: exit %d %s", code, out["result"])
			}
			names := map[string]bool{}
			for _, tool := range list.Tools {
				names[tool.Name] = true
			}
			if !names["alpha__echo"] || !names["alpha__sleep"] {
				t.Fatalf("tools/list: %v", names)
			}

			code, out = run(t, era, "--method", "tools/call", "--tool-name", "alpha__echo", "--tool-arg", "message=from the inspector")
			var res callResult
			if code != 0 || json.Unmarshal(out["result"], &res) != nil || len(res.Content) != 1 || res.Content[0].Text != "from the inspector" || res.IsError {
				t.Fatalf("tools/call: exit %d %s", code, out["result"])
			}
			// The era spoken: only 2026-07-28 results carry serverInfo.
			info, modern := res.Meta["io.modelcontextprotocol/serverInfo"]
			if modern != (era == "modern") || (modern && info.Name != "mcpbus") {
				t.Fatalf("tools/call in era %s: _meta %s", era, out["result"])
			}

			// resources/read and prompts/get: in modern mode the Inspector
			// (TypeScript SDK v2) refuses a result without resultType.
			code, out = run(t, era, "--method", "resources/read", "--uri", "mcpbus://alpha/test:%2F%2Fgreeting")
			var read struct {
				Contents []struct{ Text string } `json:"contents"`
			}
			if code != 0 || json.Unmarshal(out["result"], &read) != nil || len(read.Contents) != 1 || !strings.HasPrefix(read.Contents[0].Text, "hello from") {
				t.Fatalf("resources/read: exit %d %s %s", code, out["result"], out["error"])
			}
			code, out = run(t, era, "--method", "prompts/get", "--prompt-name", "alpha__greet", "--prompt-args", "who=inspector")
			var prompt struct {
				Messages []struct {
					Content struct{ Text string } `json:"content"`
				} `json:"messages"`
			}
			if code != 0 || json.Unmarshal(out["result"], &prompt) != nil || len(prompt.Messages) != 1 || prompt.Messages[0].Content.Text != "Hello, inspector" {
				t.Fatalf("prompts/get: exit %d %s %s", code, out["result"], out["error"])
			}

			// A schema mismatch is a tool result with isError (the Inspector
			// exits non-zero for it, having printed the result).
			code, out = run(t, era, "--method", "tools/call", "--tool-name", "alpha__echo", "--tool-args-json", `{"message":5}`)
			res = callResult{}
			if code == 0 || json.Unmarshal(out["result"], &res) != nil || !res.IsError || len(res.Content) != 1 ||
				!strings.HasPrefix(res.Content[0].Text, "arguments do not match the input schema of alpha__echo: ") {
				t.Fatalf("schema mismatch: exit %d %s", code, out["result"])
			}
		})
	}
}

// cancelScript drives /mcp with the official TypeScript SDK (v1, pinned in
// tests/npm): it cancels a slow call (notifications/cancelled), on the fast
// path and with a progress token on go-sdk's, waits past the calls' ends,
// then calls again, and prints what it saw.
const cancelScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const [url, key] = process.argv.slice(2);
const errors = [];
const client = new Client({ name: "cancel-test", version: "1" });
client.onerror = (e) => errors.push(String(e && e.message ? e.message : e));
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "Bearer " + key } } }));
const cancelled = (opts) => {
  const ac = new AbortController();
  const call = client.callTool({ name: "alpha__sleep", arguments: { ms: 2500 } }, undefined, { signal: ac.signal, ...opts })
    .then(() => "answered", (e) => "rejected");
  setTimeout(() => ac.abort("the user gave up"), 500);
  return call;
};
const outcome = await cancelled({});
// With a progress token the call goes through go-sdk, not the fast path.
const progressOutcome = await cancelled({ onprogress: () => {} });
await new Promise((r) => setTimeout(r, 3500)); // past both sleeps: a late answer would be here
const echo = await client.callTool({ name: "alpha__echo", arguments: { message: "after" } });
console.log(JSON.stringify({ outcome, progressOutcome, echo: echo.content[0].text, errors }));
await client.close();
`

// TestTypeScriptSDKCancel: after notifications/cancelled the gateway does
// not answer the cancelled id (the spec's receiver SHOULD NOT), which the
// TypeScript SDK reports as "Received a response for an unknown message ID".
func TestTypeScriptSDKCancel(t *testing.T) {
	t.Parallel()
	npmBin(t, "mcp-inspector") // the pinned packages are installed
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	bin := mcpbusBin
	up := startUpGateway(t, bin, "alpha")
	key := up.adminKey(t)
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "cancel.mjs")
	if err := os.WriteFile(script, []byte(cancelScript), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctxT(t, 60*time.Second), node, script, up.httpURL+"/mcp", key).CombinedOutput()
	if err != nil {
		t.Fatalf("node cancel.mjs: %v\n%s", err, out)
	}
	var got struct {
		Outcome, ProgressOutcome, Echo string
		Errors                         []string
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if json.Unmarshal([]byte(lines[len(lines)-1]), &got) != nil {
		t.Fatalf("cancel.mjs printed:\n%s", out)
	}
	if got.Outcome != "rejected" || got.ProgressOutcome != "rejected" || got.Echo != "after" || len(got.Errors) != 0 {
		t.Fatalf("the TypeScript SDK after a cancellation: %+v", got)
	}
}
