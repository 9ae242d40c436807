package gateway

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// tsV1CallsScript lists the tools with the TypeScript SDK v1 (which then
// validates each result against its tool's output schema) and calls each
// tool named on the command line, printing for each the error the SDK
// threw, or the result.
const tsV1CallsScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const [url, key, ...tools] = process.argv.slice(2);
const client = new Client({ name: "ts-v1-calls", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "Bearer " + key } } }));
await client.listTools();
const out = {};
for (const name of tools) {
  try {
    const res = await client.callTool({ name, arguments: {} });
    out[name] = (res.isError ? "isError " : "ok ") + (res.content?.[0]?.text ?? "");
  } catch (e) { out[name] = "threw " + e.message; }
}
console.log(JSON.stringify(out));
await client.close();
`

// TestOutputSchemaViolationReachesTSClientAsToolError: a server whose tool
// declares an output schema and breaks it (wrong structuredContent, or none)
// made the TypeScript SDK v1 client throw on the call through /mcp ("does
// not match the tool's output schema"): the gateway served the schema and
// a result it contradicts. The client now gets an isError result naming the
// violation; a conforming result passes, an error result without the
// structuredContent that breaks the schema (the SDK checks an error's too).
func TestOutputSchemaViolationReachesTSClientAsToolError(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	e := startMCP(t, gateway.Options{})
	slug := e.enable(t, remoteConfig("counter", testmcp.ServeServerHTTP(t, testmcp.NewOutputSchemaServer("counter"), nil, nil)))
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "calls.mjs")
	if err := os.WriteFile(script, []byte(tsV1CallsScript), 0o600); err != nil {
		t.Fatal(err)
	}
	tools := []string{slug + "__count", slug + "__miscount", slug + "__uncounted", slug + "__failed"}
	out, err := exec.CommandContext(ctxT(t, 60*time.Second), node, append([]string{script, e.url + "/mcp", e.admin}, tools...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node calls.mjs: %v\n%s", err, out)
	}
	var got map[string]string
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("the script's output: %v\n%s", err, out)
	}
	want := map[string]string{
		slug + "__count":     `ok {"n":1}`,
		slug + "__miscount":  "isError the result of tool miscount does not match its output schema",
		slug + "__uncounted": "isError the result of tool uncounted does not match its output schema: it has no structuredContent",
		slug + "__failed":    "isError could not count",
	}
	for k, v := range want {
		if !strings.HasPrefix(got[k], v) {
			t.Errorf("%s: %q, want %q…", k, got[k], v)
		}
	}
}
