package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
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
// gateway's message.
func TestMCPInspectorCLI(t *testing.T) {
	inspector := npmBin(t, "mcp-inspector")
	bin := clitest.Build(t)
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
