package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// cliIn runs one mcpbus client command with stdin and extra environment.
func cliIn(t *testing.T, bin, natsURL, stdin string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--nats", natsURL}, args...)...)
	cmd.Env = cleanEnv(env...)
	if d, ok := dataDirs[natsURL]; ok {
		cmd.Env = append(cmd.Env, "MCPBUS_DATA_DIR="+d)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("mcpbus %v: %v", args, err)
	}
	return r
}

// TestCLIServersAndSecrets manages a real server through `mcpbus servers` and
// `mcpbus cred` against a real `mcpbus up`: the secret is read from stdin,
// never shown, reaches nothing but the credential store and the child.
func TestCLIServersAndSecrets(t *testing.T) {
	everything := npmBin(t, "mcp-server-everything")
	bin := buildCLI(t)
	dir := t.TempDir()
	port := testkit.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	up := startUp(t, bin, dir, cleanEnv(), "--nats-port", strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"))
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "servers", "list")
		return r.code == 0, r.String()
	})
	const secret = "cli-secret-8d1f4b2a"
	must := func(r cliResult, what string) cliResult {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%s: %s", what, r)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Fatalf("%s printed the secret: %s", what, r)
		}
		return r
	}

	// add: the secret comes on stdin; a secret-looking --env is refused.
	must(cliIn(t, bin, url, secret+"\n", nil, "servers", "add", "everything", "--binary", everything,
		"--secret-env", "DEMO_API_KEY", "--env", "MODE=demo"), "servers add")
	if r := cli(t, bin, url, "servers", "add", "leaky", "--binary", everything, "--env", "GITHUB_TOKEN=ghp_x"); r.code == 0 || !strings.Contains(r.stderr, "--secret-env") {
		t.Fatalf("a secret on the command line was accepted: %s", r)
	}
	r := must(cli(t, bin, url, "servers", "list", "--json"), "servers list")
	var list model.ConfigListReply
	if json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Configs) != 1 || list.Configs[0].Enabled {
		t.Fatalf("servers list: %s", r.stdout)
	}
	r = must(cli(t, bin, url, "cred", "describe", "everything"), "cred describe")
	if !strings.Contains(r.stdout, "DEMO_API_KEY") {
		t.Fatalf("cred describe: %s", r)
	}

	// enable: started before the command returns.
	must(cli(t, bin, url, "servers", "enable", "everything"), "servers enable")
	if st, r := statusOf(t, bin, url, "everything"); st.State != model.StateRunning {
		t.Fatalf("after enable: %s", r)
	}
	r = must(cli(t, bin, url, "call", "everything.echo", `{"message":"through the cli"}`), "call")
	if !strings.Contains(r.stdout, "through the cli") {
		t.Fatalf("call: %s", r)
	}

	// edit with a tool filter, then roll it back.
	must(cli(t, bin, url, "servers", "edit", "everything", "--deny-tool", "echo"), "servers edit")
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "tools", "--server", "everything")
		return r.code == 0 && !strings.Contains(r.stdout, "everything__echo"), r.String()
	})
	r = must(cli(t, bin, url, "servers", "history", "everything", "--json"), "servers history")
	var hist model.ConfigHistoryReply
	if json.Unmarshal([]byte(r.stdout), &hist) != nil || len(hist.Revisions) < 3 {
		t.Fatalf("history: %s", r.stdout)
	}
	first := hist.Revisions[0].Revision
	must(cli(t, bin, url, "servers", "rollback", "everything", strconv.FormatUint(first, 10)), "servers rollback")
	if got, _ := cliConfig(t, bin, url, "everything"); got.Enabled || len(got.Tools.Deny) != 0 {
		t.Fatalf("rollback to revision %d gave %+v", first, got)
	}

	// export shows the secret as a variable only.
	r = must(cli(t, bin, url, "servers", "export", "--format", "mcp.yaml"), "servers export")
	if !strings.Contains(r.stdout, "${DEMO_API_KEY}") || !strings.Contains(r.stdout, "demo") {
		t.Fatalf("export: %s", r.stdout)
	}

	// import a Cursor file whose secret comes from the environment.
	cursor := filepath.Join(dir, "mcp.json")
	file := fmt.Sprintf(`{"mcpServers": {"second": {"command": %q, "env": {"SECOND_TOKEN": "${SECOND_TOKEN}"}}}}`, everything)
	if err := os.WriteFile(cursor, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	must(cliIn(t, bin, url, "", []string{"SECOND_TOKEN=" + secret}, "servers", "import", cursor), "servers import")
	r = must(cli(t, bin, url, "cred", "describe", "second", "--json"), "cred describe second")
	if !strings.Contains(r.stdout, "SECOND_TOKEN") {
		t.Fatalf("imported secret not stored: %s", r.stdout)
	}

	// rm deletes config and secrets.
	must(cli(t, bin, url, "servers", "rm", "everything"), "servers rm")
	if r := cli(t, bin, url, "cred", "describe", "everything", "--json"); r.code == 0 || !strings.Contains(r.stdout, "NOT_FOUND") {
		t.Fatalf("describe after rm: %s", r)
	}
	if code := up.terminate(t, 15*time.Second); code != 0 {
		t.Fatalf("mcpbus up exited %d", code)
	}
	if strings.Contains(up.logs.String(), secret) {
		t.Fatal("the secret is in the mcpbus up log")
	}
}

func cliConfig(t *testing.T, bin, url, server string) (model.McpConfig, cliResult) {
	t.Helper()
	r := cli(t, bin, url, "servers", "get", server)
	var cfg model.McpConfig
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &cfg) != nil {
		t.Fatalf("servers get %s: %s", server, r)
	}
	return cfg, r
}
