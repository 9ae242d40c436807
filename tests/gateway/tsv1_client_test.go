package gateway

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// tsV1RefusalsScript drives /mcp with the official TypeScript SDK v1 (a
// session of 2025-11-25): requests the gateway does not serve, and a list
// cursor it did not issue. It prints, for each, the class and code of the
// error the SDK gave.
const tsV1RefusalsScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { z } from "zod";
const [url, key] = process.argv.slice(2);
const client = new Client({ name: "ts-v1-refusals", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "Bearer " + key } } }));
const out = {};
const attempt = async (what, f) => {
  try { await f(); out[what] = "ok"; } catch (e) { out[what] = e.constructor.name + " " + e.code; }
};
for (const m of ["foo/bar", "roots/list", "sampling/createMessage", "elicitation/create"]) {
  await attempt(m, () => client.request({ method: m, params: {} }, z.any()));
}
await attempt("logging/setLevel", () => client.setLoggingLevel("debug"));
await attempt("resources/list cursor", () => client.listResources({ cursor: "bogus" }));
await attempt("tools/list", () => client.listTools());
console.log(JSON.stringify(out));
await client.close();
`

// TestTypeScriptSDKv1Refusals: what the gateway does not serve reaches a
// TypeScript SDK v1 client as McpError with its JSON-RPC code (a JSON-RPC
// error in a 200 answer), not as a StreamableHTTPError (an HTTP 400), as it
// would from the SDK's own servers; the session goes on.
func TestTypeScriptSDKv1Refusals(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	e := startMCP(t, gateway.Options{})
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "refusals.mjs")
	if err := os.WriteFile(script, []byte(tsV1RefusalsScript), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctxT(t, 60*time.Second), node, script, e.url+"/mcp", e.admin).CombinedOutput()
	if err != nil {
		t.Fatalf("node refusals.mjs: %v\n%s", err, out)
	}
	var got map[string]string
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("the script's output: %v\n%s", err, out)
	}
	want := map[string]string{
		"foo/bar": "McpError -32601", "roots/list": "McpError -32601",
		"sampling/createMessage": "McpError -32601", "elicitation/create": "McpError -32601",
		"logging/setLevel":      "McpError -32601",
		"resources/list cursor": "McpError -32602",
		"tools/list":            "ok",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}
