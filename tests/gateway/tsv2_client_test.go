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

	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// tsV2Script drives /mcp with the official TypeScript SDK v2
// (@modelcontextprotocol/client, pinned in tests/npm through the
// Inspector): version negotiation as given (auto: 2026-07-28 through
// server/discover; legacy: initialize and a session), form elicitation and
// sampling answered by its handlers (multi round-trip results on
// 2026-07-28, server requests on the session), a call and a schema
// mismatch. It prints one JSON object of what it saw.
const tsV2Script = `
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
const [url, key, mode] = process.argv.slice(2);
const client = new Client({ name: "ts-v2-test", version: "1" },
  { capabilities: { elicitation: { form: {} }, sampling: {} }, versionNegotiation: { mode } });
let asked = "";
client.setRequestHandler("elicitation/create", async (req) => {
  asked = req.params.message;
  return { action: "accept", content: { name: "Ada", age: 36, colour: "green" } };
});
client.setRequestHandler("sampling/createMessage", async (req) =>
  ({ role: "assistant", model: "ts-model", content: { type: "text", text: "sampled " + req.params.messages[0].content.text } }));
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "Bearer " + key } } }));
const tools = (await client.listTools()).tools.map((t) => t.name);
const echo = await client.callTool({ name: "alpha__echo", arguments: { message: "ts v2" } });
const bad = await client.callTool({ name: "alpha__echo", arguments: { message: 5 } });
const ask = await client.callTool({ name: "alpha__ask", arguments: { message: "Who are you?" } });
const sample = await client.callTool({ name: "alpha__sample", arguments: { message: "hi" } });
console.log(JSON.stringify({ era: client.getProtocolEra(), version: client.getNegotiatedProtocolVersion(), tools,
  echo: echo.content[0].text, badError: bad.isError === true, bad: bad.content[0].text, asked,
  ask: ask.content[0].text, sample: sample.content[0].text }));
await client.close();
`

// TestTypeScriptSDKv2 runs tsV2Script against /mcp in both of the SDK's
// eras: what a user of the current TypeScript SDK sees, the servers'
// requests for input included.
func TestTypeScriptSDKv2(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	e := startMCP(t, gateway.Options{})
	e.enable(t, binaryConfig("alpha", testServer, "-name", "alpha"))
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(clitest.RepoRoot(t), "tests", "npm", "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "v2.mjs")
	if err := os.WriteFile(script, []byte(tsV2Script), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, era := range []struct{ mode, era, version string }{
		{"auto", "modern", "2026-07-28"},
		{"legacy", "legacy", "2025-11-25"},
	} {
		t.Run(era.mode, func(t *testing.T) {
			out, err := exec.CommandContext(ctxT(t, 90*time.Second), node, script, e.url+"/mcp", e.admin, era.mode).CombinedOutput()
			if err != nil {
				t.Fatalf("node v2.mjs %s: %v\n%s", era.mode, err, out)
			}
			var got struct {
				Era, Version          string
				Tools                 []string
				Echo, Bad, Asked, Ask string
				BadError              bool
				Sample                string
			}
			if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
				t.Fatalf("the script's output: %v\n%s", err, out)
			}
			if got.Era != era.era || got.Version != era.version {
				t.Fatalf("era %q version %q, want %q %q", got.Era, got.Version, era.era, era.version)
			}
			listed := strings.Join(got.Tools, " ")
			if !strings.Contains(listed, "alpha__echo") || !strings.Contains(listed, "alpha__ask") || got.Echo != "ts v2" {
				t.Fatalf("tools and echo: %s", out)
			}
			if !got.BadError || !strings.Contains(got.Bad, "arguments do not match the input schema of alpha__echo") {
				t.Fatalf("a schema mismatch: %s", out)
			}
			if got.Asked != "Who are you?" || got.Ask != "hello Ada, age 36, colour green" {
				t.Fatalf("elicitation: %s", out)
			}
			if got.Sample != "ts-model said: sampled hi" {
				t.Fatalf("sampling: %s", out)
			}
		})
	}
}
