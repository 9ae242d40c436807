package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// runCLI runs the CLI in process with no NATS identity around.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("MCPBUS_DATA_DIR", t.TempDir())
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// existing is a config file of each client with an entry and a setting of
// the user's own.
var existing = map[string]string{
	"claude":   `{"globalShortcut": "Ctrl+Space", "mcpServers": {"github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_TOKEN": "t"}}}}`,
	"cursor":   `{"mcpServers": {"github": {"url": "https://api.githubcopilot.com/mcp/", "headers": {"Authorization": "Bearer t"}}}}`,
	"vscode":   `{"inputs": [{"id": "tok", "type": "promptString"}], "servers": {"github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/"}}}`,
	"windsurf": `{"mcpServers": {"github": {"serverUrl": "https://api.githubcopilot.com/mcp/"}}}`,
	"codex":    "# my settings\nmodel = \"o3\"\n\n[mcp_servers.github]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-github\"]\n",
}

// parseConfig reads a client's file as generic data.
func parseConfig(t *testing.T, client string, data []byte) map[string]any {
	t.Helper()
	doc := map[string]any{}
	var err error
	if mcpClients[client].format == "toml" {
		err = toml.Unmarshal(data, &doc)
	} else {
		err = json.Unmarshal(data, &doc)
	}
	if err != nil {
		t.Fatalf("%s file does not parse: %v\n%s", client, err, data)
	}
	return doc
}

// TestConnectMergeKeepsEntries merges the serve-stdio entry into each
// client's file holding an entry and settings of its own: all of them are
// still there, unchanged, beside the new entry.
func TestConnectMergeKeepsEntries(t *testing.T) {
	for _, client := range clientNames() {
		t.Run(client, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config")
			if err := os.WriteFile(file, []byte(existing[client]), 0o644); err != nil {
				t.Fatal(err)
			}
			before := parseConfig(t, client, []byte(existing[client]))
			code, out, errOut := runCLI(t, "connect", client, "--stdio", "--command", "/opt/mcpbus", "--file", file, "--allow-tool", "a__*")
			if code != 0 {
				t.Fatalf("connect: %d %s %s", code, out, errOut)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			after := parseConfig(t, client, data)
			section := mcpClients[client].section
			for k, v := range before {
				if k == section {
					continue
				}
				if !reflect.DeepEqual(after[k], v) {
					t.Errorf("setting %s: %v, was %v", k, after[k], v)
				}
			}
			servers, _ := after[section].(map[string]any)
			if want := before[section].(map[string]any)["github"]; !reflect.DeepEqual(servers["github"], want) {
				t.Errorf("the existing entry: %v, was %v", servers["github"], want)
			}
			entry, _ := servers["mcpbus"].(map[string]any)
			args, _ := entry["args"].([]any)
			if entry["command"] != "/opt/mcpbus" || len(args) != 3 || args[0] != "serve-stdio" || args[1] != "--allow-tool" || args[2] != "a__*" {
				t.Errorf("the new entry: %v", entry)
			}
			if client == "vscode" && entry["type"] != "stdio" {
				t.Errorf("VS Code's entry needs type stdio: %v", entry)
			}
			if client == "codex" && !bytes.HasPrefix(data, []byte(existing[client])) {
				t.Errorf("appending to config.toml changed what was there:\n%s", data)
			}
			if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("file mode %v (%v), want 0600", st.Mode(), err)
			}
		})
	}
}

// TestConnectRefusesExistingName keeps an entry of the same name unless
// --force, and --force replaces it.
func TestConnectRefusesExistingName(t *testing.T) {
	for _, client := range []string{"cursor", "codex"} {
		t.Run(client, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config")
			if err := os.WriteFile(file, []byte(existing[client]), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := runCLI(t, "connect", client, "--stdio", "--command", "/opt/mcpbus", "--file", file, "--name", "github")
			if code == 0 || !strings.Contains(errOut, "CONFLICT") || !strings.Contains(errOut, "--force") {
				t.Fatalf("connect over an existing entry: %d %s %s", code, out, errOut)
			}
			if data, _ := os.ReadFile(file); string(data) != existing[client] {
				t.Fatalf("a refused connect changed the file:\n%s", data)
			}
			if code, out, errOut := runCLI(t, "connect", client, "--stdio", "--command", "/opt/mcpbus", "--file", file, "--name", "github", "--force"); code != 0 {
				t.Fatalf("connect --force: %d %s %s", code, out, errOut)
			}
			data, _ := os.ReadFile(file)
			doc := parseConfig(t, client, data)
			entry := doc[mcpClients[client].section].(map[string]any)["github"].(map[string]any)
			if entry["command"] != "/opt/mcpbus" {
				t.Errorf("--force did not replace the entry: %v", entry)
			}
		})
	}
}

// TestConnectPrintWritesNothing prints the entry in the client's format and
// leaves the file alone.
func TestConnectPrintWritesNothing(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mcp.json")
	code, out, errOut := runCLI(t, "connect", "vscode", "--stdio", "--print", "--command", "/opt/mcpbus", "--file", file)
	if code != 0 {
		t.Fatalf("connect --print: %d %s %s", code, out, errOut)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("--print wrote %s (%v)", file, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("--print left files: %v", entries)
	}
	doc := parseConfig(t, "vscode", []byte(out))
	if e := doc["servers"].(map[string]any)["mcpbus"].(map[string]any); e["command"] != "/opt/mcpbus" || e["type"] != "stdio" {
		t.Errorf("printed entry: %s", out)
	}
}

// TestConnectRefusesJSONWithComments leaves a JSONC file (VS Code allows
// comments) as it is rather than rewriting it without them.
func TestConnectRefusesJSONWithComments(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mcp.json")
	jsonc := "{\n  // mine\n  \"servers\": {}\n}\n"
	if err := os.WriteFile(file, []byte(jsonc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, "connect", "vscode", "--stdio", "--command", "/opt/mcpbus", "--file", file)
	if code == 0 || !strings.Contains(errOut, "VALIDATION_ERROR") || !strings.Contains(errOut, "comments") {
		t.Fatalf("connect into JSONC: %d %s", code, errOut)
	}
	if data, _ := os.ReadFile(file); string(data) != jsonc {
		t.Errorf("the file changed:\n%s", data)
	}
}

// TestConnectHTTPEntries checks each client's URL entry: the key names its
// documentation gives, the header carrying the key.
func TestConnectHTTPEntries(t *testing.T) {
	const u, authz = "http://127.0.0.1:8080/mcp", "Bearer mcpbus_k_s"
	headers := map[string]any{"Authorization": authz}
	want := map[string]map[string]any{
		"cursor":   {"url": u, "headers": headers},
		"vscode":   {"type": "http", "url": u, "headers": headers},
		"windsurf": {"serverUrl": u, "headers": headers},
		"codex":    {"url": u, "http_headers": headers},
		"claude": {"command": "npx", "args": []string{"-y", mcpRemote, u, "--header", "Authorization:${MCPBUS_AUTHORIZATION}"},
			"env": map[string]any{"MCPBUS_AUTHORIZATION": authz}},
	}
	for client, w := range want {
		if got := mcpClients[client].http(u, authz); !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %v, want %v", client, got, w)
		}
	}
	// A codex entry appended to a file parses back with its header table.
	out, err := mergeEntry("toml", []byte(existing["codex"]), "mcp_servers", "mcpbus", want["codex"], false)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseConfig(t, "codex", out)
	if got := doc["mcp_servers"].(map[string]any)["mcpbus"]; !reflect.DeepEqual(got, want["codex"]) {
		t.Errorf("codex entry read back: %v\n%s", got, out)
	}
	if !insecureRemote("http://gw.example:8080/mcp") || insecureRemote(u) || insecureRemote("https://gw.example/mcp") {
		t.Error("insecureRemote: only plain http beyond this host needs mcp-remote's --allow-http")
	}
	for in, w := range map[string]string{"http://h:1": "http://h:1/mcp", "https://h/base/": "https://h/base/mcp", "http://h/mcp": "http://h/mcp"} {
		if got, err := gatewayMCPURL(in); err != nil || got != w {
			t.Errorf("gatewayMCPURL(%q) = %q, %v; want %q", in, got, err, w)
		}
	}
}

// TestConnectStdioKeepsEnvSettings: NATS settings given through their env
// vars (as the README offers: MCPBUS_NATS_URL) go into a --stdio entry as
// flags, as when given as flags: the client spawns the entry without the
// environment of the shell that ran connect.
func TestConnectStdioKeepsEnvSettings(t *testing.T) {
	t.Setenv("MCPBUS_NATS_URL", "nats://127.0.0.1:14222")
	t.Setenv("MCPBUS_PREFIX", "mcp.v9")
	t.Setenv("MCPBUS_NATS_KEEP_ORDER", "true")
	code, out, errOut := runCLI(t, "connect", "claude", "--stdio", "--print", "--command", "/opt/mcpbus")
	if code != 0 {
		t.Fatalf("connect --stdio --print: %d %s %s", code, out, errOut)
	}
	var doc struct {
		MCPServers map[string]struct {
			Args []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	args := strings.Join(doc.MCPServers["mcpbus"].Args, " ")
	for _, want := range []string{"--nats nats://127.0.0.1:14222", "--prefix mcp.v9", "--nats-keep-order"} {
		if !strings.Contains(args, want) {
			t.Errorf("the entry's args %q lack %q", args, want)
		}
	}

	// Defaults stay out of the entry.
	t.Setenv("MCPBUS_NATS_URL", "")
	t.Setenv("MCPBUS_PREFIX", "")
	t.Setenv("MCPBUS_NATS_KEEP_ORDER", "")
	code, out, errOut = runCLI(t, "connect", "claude", "--stdio", "--print", "--command", "/opt/mcpbus")
	if code != 0 {
		t.Fatalf("connect --stdio --print: %d %s %s", code, out, errOut)
	}
	if strings.Contains(out, "--nats\"") || strings.Contains(out, "--prefix") || strings.Contains(out, "keep-order") {
		t.Errorf("defaults written into the entry: %s", out)
	}
}
