package clitest

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWhere(t *testing.T) {
	for _, c := range []struct {
		name      string
		env, args []string
		url, data string
	}{
		{name: "defaults", url: "nats://127.0.0.1:4222", data: filepath.Join("/cwd", ".mcpbus")},
		{name: "env", env: []string{"MCPBUS_NATS_PORT=4300", "MCPBUS_DATA_DIR=/d"}, url: "nats://127.0.0.1:4300", data: "/d"},
		{name: "flags over env", env: []string{"MCPBUS_NATS_PORT=4300", "MCPBUS_DATA_DIR=/d"},
			args: []string{"--nats-port", "4301", "--data-dir", "rel"}, url: "nats://127.0.0.1:4301", data: filepath.Join("/cwd", "rel")},
	} {
		url, data := where("/cwd", c.env, c.args)
		if url != c.url || data != c.data {
			t.Errorf("%s: %s %s, want %s %s", c.name, url, data, c.url, c.data)
		}
	}
}

func TestEnv(t *testing.T) {
	t.Setenv("MCPBUS_NATS_PORT", "4300")
	t.Setenv("CLITEST_KEPT", "1")
	env := Env("MCPBUS_DATA_DIR=/d")
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "MCPBUS_NATS_PORT=") }) ||
		!slices.Contains(env, "CLITEST_KEPT=1") || env[len(env)-1] != "MCPBUS_DATA_DIR=/d" {
		t.Errorf("Env: %v", env)
	}
}

// TestUpAddrs reads the addresses as up prints them (the JSON log lines
// around them name other URLs, which must not match).
func TestUpAddrs(t *testing.T) {
	log := `{"level":"INFO","msg":"gateway listening","addr":"127.0.0.1:39001"}
mcpbus is up: NATS at nats://127.0.0.1:38123, data in /tmp/d, secrets in file. Try: mcpbus servers list; mcpbus tools
bus identities (nkeys, 0600) in /tmp/d/nats; the CLI uses operator.nk from there
`
	if n, h := upAddrs(log); n != "nats://127.0.0.1:38123" || h != "" {
		t.Errorf("before the gateway's line: %q %q", n, h)
	}
	log += "gateway: MCP endpoint http://127.0.0.1:39001/mcp, REST API http://127.0.0.1:39001/api/v1 (OpenAPI at /api/v1/openapi.json)\n"
	if n, h := upAddrs(log); n != "nats://127.0.0.1:38123" || h != "http://127.0.0.1:39001" {
		t.Errorf("after it: %q %q", n, h)
	}
	if n, h := upAddrs(`{"msg":"mcpbus up","nats":"nats://127.0.0.1:1"}`); n != "" || h != "" {
		t.Errorf("a log line only: %q %q", n, h)
	}
}
