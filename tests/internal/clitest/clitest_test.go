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
