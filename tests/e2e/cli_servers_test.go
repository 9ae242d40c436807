package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// cliIn runs one mcpbus client command with stdin and extra environment.
func cliIn(t *testing.T, bin, natsURL, stdin string, env []string, args ...string) clitest.Result {
	t.Helper()
	c := cliFor(bin, natsURL)
	c.Env, c.Timeout = clitest.Env(env...), 2*time.Minute
	return c.RunInput(t, stdin, args...)
}

// TestCLIServersAndSecrets manages a real server through `mcpbus servers` and
// `mcpbus cred` against a real `mcpbus up`: the secret is read from stdin,
// never shown, reaches nothing but the credential store and the child.
func TestCLIServersAndSecrets(t *testing.T) {
	t.Parallel()
	everything := npmBin(t, "mcp-server-everything")
	bin := mcpbusBin
	dir := t.TempDir()
	up := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data"))
	url := up.NATSURL()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "servers", "list")
		return r.Code == 0, r.String()
	})
	const secret = "cli-secret-8d1f4b2a"
	must := func(r clitest.Result, what string) clitest.Result {
		t.Helper()
		if r.Code != 0 {
			t.Fatalf("%s: %s", what, r)
		}
		if strings.Contains(r.Stdout+r.Stderr, secret) {
			t.Fatalf("%s printed the secret: %s", what, r)
		}
		return r
	}

	// add: the secret comes on stdin; a secret-looking --env is refused.
	must(cliIn(t, bin, url, secret+"\n", nil, "servers", "add", "everything", "--binary", everything,
		"--secret-env", "DEMO_API_KEY", "--env", "MODE=demo"), "servers add")
	if r := cli(t, bin, url, "servers", "add", "leaky", "--binary", everything, "--env", "GITHUB_TOKEN=ghp_x"); r.Code == 0 || !strings.Contains(r.Stderr, "--secret-env") {
		t.Fatalf("a secret on the command line was accepted: %s", r)
	}
	r := must(cli(t, bin, url, "servers", "list", "--json"), "servers list")
	var list model.ConfigListReply
	if json.Unmarshal([]byte(r.Stdout), &list) != nil || len(list.Configs) != 1 || list.Configs[0].Enabled {
		t.Fatalf("servers list: %s", r.Stdout)
	}
	r = must(cli(t, bin, url, "cred", "describe", "everything"), "cred describe")
	if !strings.Contains(r.Stdout, "DEMO_API_KEY") {
		t.Fatalf("cred describe: %s", r)
	}

	// enable: started before the command returns.
	must(cli(t, bin, url, "servers", "enable", "everything"), "servers enable")
	if st, r := statusOf(t, bin, url, "everything"); st.State != model.StateRunning {
		t.Fatalf("after enable: %s", r)
	}
	r = must(cli(t, bin, url, "call", "everything.echo", `{"message":"through the cli"}`), "call")
	if !strings.Contains(r.Stdout, "through the cli") {
		t.Fatalf("call: %s", r)
	}

	// edit with a tool filter, then roll it back.
	must(cli(t, bin, url, "servers", "edit", "everything", "--deny-tool", "echo"), "servers edit")
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "tools", "--server", "everything")
		return r.Code == 0 && !strings.Contains(r.Stdout, "everything__echo"), r.String()
	})
	r = must(cli(t, bin, url, "servers", "history", "everything", "--json"), "servers history")
	var hist model.ConfigHistoryReply
	if json.Unmarshal([]byte(r.Stdout), &hist) != nil || len(hist.Revisions) < 3 {
		t.Fatalf("history: %s", r.Stdout)
	}
	first := hist.Revisions[0].Version
	if first != 1 {
		t.Fatalf("history starts at version %d: %s", first, r.Stdout)
	}
	must(cli(t, bin, url, "servers", "rollback", "everything", strconv.FormatUint(first, 10)), "servers rollback")
	if got, _ := cliConfig(t, bin, url, "everything"); got.Enabled || len(got.Tools.Deny) != 0 {
		t.Fatalf("rollback to version %d gave %+v", first, got)
	}

	// export shows the secret as a variable only.
	r = must(cli(t, bin, url, "servers", "export", "--format", "mcp.yaml"), "servers export")
	if !strings.Contains(r.Stdout, "${DEMO_API_KEY}") || !strings.Contains(r.Stdout, "demo") {
		t.Fatalf("export: %s", r.Stdout)
	}

	// import a Cursor file whose secret comes from the environment.
	cursor := filepath.Join(dir, "mcp.json")
	file := fmt.Sprintf(`{"mcpServers": {"second": {"command": %q, "env": {"SECOND_TOKEN": "${SECOND_TOKEN}"}}}}`, everything)
	if err := os.WriteFile(cursor, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	r = must(cliIn(t, bin, url, "", []string{"SECOND_TOKEN=" + secret}, "servers", "import", cursor), "servers import")
	if !strings.Contains(r.Stderr, "from your environment: SECOND_TOKEN") || strings.Contains(r.Stderr+r.Stdout, secret) {
		t.Fatalf("import names the variables it takes, never their values: %s", r)
	}
	r = must(cli(t, bin, url, "cred", "describe", "second", "--json"), "cred describe second")
	if !strings.Contains(r.Stdout, "SECOND_TOKEN") {
		t.Fatalf("imported secret not stored: %s", r.Stdout)
	}

	// rm deletes config and secrets.
	must(cli(t, bin, url, "servers", "rm", "everything", "--yes"), "servers rm")
	if r := cli(t, bin, url, "cred", "describe", "everything", "--json"); r.Code == 0 || !strings.Contains(r.Stdout, "NOT_FOUND") {
		t.Fatalf("describe after rm: %s", r)
	}
	up.Stop(t, 15*time.Second)
	if strings.Contains(up.Output(), secret) {
		t.Fatal("the secret is in the mcpbus up log")
	}
}

func cliConfig(t *testing.T, bin, url, server string) (model.McpConfig, clitest.Result) {
	t.Helper()
	r := cli(t, bin, url, "servers", "get", server)
	var cfg model.McpConfig
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &cfg) != nil {
		t.Fatalf("servers get %s: %s", server, r)
	}
	return cfg, r
}
