package gateway

import (
	"context"
	"encoding/json"
	"net/http"
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
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestConnectClients runs the built `mcpbus connect` against a real
// `mcpbus up`: the entry it merges into a client's file (beside an entry of
// the user's) carries a new key of scope call that lists and calls tools over
// /mcp and is refused the admin API; --print makes a key and writes no file;
// the --stdio entry, spawned as the client would from elsewhere, serves the
// tools over stdio.
func TestConnectClients(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin
	up := startUpGateway(t, bin, "alpha")
	dir := t.TempDir()

	file := filepath.Join(dir, "cursor", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{"mcpServers": {"mine": {"command": "x"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := up.runCLI(t, "--json", "connect", "cursor", "--file", file, "--url", up.httpURL, "--allow-tool", "alpha__*")
	if r.Code != 0 {
		t.Fatalf("connect cursor: %s", r)
	}
	var res struct {
		KeyID string `json:"key_id"`
		File  string `json:"file"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.KeyID == "" || res.File != file {
		t.Fatalf("connect --json: %s (%v)", r.Stdout, err)
	}
	var doc struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	data, _ := os.ReadFile(file)
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the written file: %v\n%s", err, data)
	}
	entry := doc.MCPServers["mcpbus"]
	if doc.MCPServers["mine"].Command != "x" || entry.URL != up.httpURL+"/mcp" {
		t.Fatalf("the written file:\n%s", data)
	}
	key, ok := strings.CutPrefix(entry.Headers["Authorization"], "Bearer ")
	if !ok || strings.Contains(r.Stdout+r.Stderr, key) {
		t.Fatalf("the entry's header %q (the key must be in the file only)", entry.Headers["Authorization"])
	}

	// The key is a call key with the tool filter given, listed as such.
	r = up.runCLI(t, "--json", "keys", "list")
	var list model.KeyListReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
		t.Fatalf("keys list: %s", r)
	}
	i := slices.IndexFunc(list.Keys, func(k model.APIKey) bool { return k.ID == res.KeyID })
	if i < 0 || !slices.Equal(list.Keys[i].Scopes, []string{model.KeyScopeCall}) || list.Keys[i].Name != "cursor-mcpbus" ||
		!slices.Equal(list.Keys[i].Tools.Allow, []string{"alpha__*"}) {
		t.Fatalf("the key connect made: %s", r.Stdout)
	}
	s := connectMCP(t, up.httpURL, key)
	if got := callText(t, s.ClientSession, "alpha__echo", map[string]any{"message": "via connect"}); got != "via connect" {
		t.Errorf("alpha__echo with the connect key returned %q", got)
	}
	_ = s.Close()
	if rep := httpDo(t, http.MethodGet, up.httpURL+"/api/v1/keys", key, nil); rep.status != http.StatusForbidden {
		t.Errorf("the connect key on the admin API: HTTP %d, want 403", rep.status)
	}

	// The same name again is refused, and no key is made for it.
	if r := up.runCLI(t, "connect", "cursor", "--file", file, "--url", up.httpURL); r.Code == 0 || !strings.Contains(r.Stderr, "CONFLICT") {
		t.Errorf("connect over its own entry: %s", r)
	}
	// --print: a key, no file.
	printed := filepath.Join(dir, "vscode", "mcp.json")
	r = up.runCLI(t, "connect", "vscode", "--print", "--file", printed, "--url", up.httpURL)
	if r.Code != 0 || !strings.Contains(r.Stdout, `"type": "http"`) || !strings.Contains(r.Stdout, "Bearer mcpbus_") {
		t.Fatalf("connect vscode --print: %s", r)
	}
	if _, err := os.Stat(filepath.Dir(printed)); !os.IsNotExist(err) {
		t.Errorf("--print created %s (%v)", filepath.Dir(printed), err)
	}
	r = up.runCLI(t, "--json", "keys", "list")
	list = model.KeyListReply{}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
		t.Fatalf("keys list: %s", r)
	}
	var names []string
	for _, k := range list.Keys {
		if strings.HasSuffix(k.Name, "-mcpbus") {
			names = append(names, k.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"cursor-mcpbus", "vscode-mcpbus"}) {
		t.Errorf("keys after connect, a refused connect and --print: %v", names)
	}

	// --stdio: the entry runs serve-stdio with absolute paths, from anywhere.
	claudeFile := filepath.Join(dir, "claude_desktop_config.json")
	if r := up.runCLI(t, "connect", "claude", "--stdio", "--file", claudeFile); r.Code != 0 {
		t.Fatalf("connect claude --stdio: %s", r)
	}
	var claude struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	data, _ = os.ReadFile(claudeFile)
	if err := json.Unmarshal(data, &claude); err != nil {
		t.Fatal(err)
	}
	e := claude.MCPServers["mcpbus"]
	if e.Command != bin || !slices.Contains(e.Args, "--nats-nkey") {
		t.Fatalf("the --stdio entry: %s", data)
	}
	cmd := exec.Command(e.Command, e.Args...)
	cmd.Dir = t.TempDir() // no .mcpbus here, and no MCPBUS_DATA_DIR: the entry names the identity
	cmd.Env = clitest.Env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "connect-test", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatalf("spawning the --stdio entry: %v", err)
	}
	defer cs.Close()
	if got := callText(t, cs, "alpha__echo", map[string]any{"message": "stdio"}); got != "stdio" {
		t.Errorf("alpha__echo over the --stdio entry returned %q", got)
	}
}
