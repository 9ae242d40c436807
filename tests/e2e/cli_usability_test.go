package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestCLIUsability walks what a new user tripped on (issue 17) against a real
// `mcpbus up`: a secret the server never sees is refused, a second
// --deny-tool adds, export says what a client format drops, history and
// rollback count per server, and a YAML mistake names its line.
func TestCLIUsability(t *testing.T) {
	t.Parallel()
	everything := npmBin(t, "mcp-server-everything")
	bin := mcpbusBin
	dir := t.TempDir()

	// A YAML mistake on line 3 is reported on line 3, by `up --config` too.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("servers:\n  - name: a\n- name: b\n    package: {type: npm, identifier: p}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badUp := clitest.StartUp(t, bin, clitest.UpOptions{Dir: dir, Args: []string{"--config", bad, "--nats-port", strconv.Itoa(testkit.FreePort(t)),
		"--data-dir", filepath.Join(dir, "bad-data")}})
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) { return badUp.Exited(), badUp.Output() })
	if !strings.Contains(badUp.Output(), "line 3: did not find expected key") {
		t.Fatalf("up --config with a mistake on line 3:\n%s", badUp.Output())
	}

	url := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data")).NATSURL()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "servers", "list")
		return r.Code == 0, r.String()
	})
	must := func(r clitest.Result, what string) clitest.Result {
		t.Helper()
		if r.Code != 0 {
			t.Fatalf("%s: %s", what, r)
		}
		return r
	}
	if r := cli(t, bin, url, "servers", "add", "-f", bad); r.Code == 0 || !strings.Contains(r.Stderr, "line 3: did not find expected key") {
		t.Fatalf("servers add -f with a mistake on line 3: %s", r)
	}
	must(cli(t, bin, url, "servers", "add", "everything", "--binary", everything, "--enabled"), "servers add")
	must(cli(t, bin, url, "servers", "add", "other", "--binary", everything), "servers add other")

	// A secret for a server whose config declares none never reaches it:
	// refused, naming the way to declare one; nothing is stored.
	r := cliIn(t, bin, url, "x\n", nil, "cred", "set", "everything", "DUMMY_TOKEN", "--json")
	var e struct{ Code, Message, Field string }
	if r.Code == 0 || json.Unmarshal([]byte(r.Stdout), &e) != nil || e.Code != "VALIDATION_ERROR" || e.Field != "env.DUMMY_TOKEN" ||
		!strings.Contains(e.Message, "--secret-env") || strings.Contains(r.Stdout+r.Stderr, "restarted") {
		t.Fatalf("cred set of an undeclared variable: %s", r)
	}
	if r := must(cli(t, bin, url, "cred", "describe", "everything"), "cred describe"); strings.Contains(r.Stdout, "DUMMY_TOKEN") {
		t.Fatalf("the refused secret was stored: %s", r)
	}

	// Repeated --deny-tool (over two edits) adds; --unset-deny-tool removes.
	must(cli(t, bin, url, "servers", "edit", "everything", "--deny-tool", "echo"), "edit 1")
	must(cli(t, bin, url, "servers", "edit", "everything", "--deny-tool", "add"), "edit 2")
	if got, _ := cliConfig(t, bin, url, "everything"); !slices.Equal(got.Tools.Deny, []string{"echo", "add"}) {
		t.Fatalf("two --deny-tool edits: %v", got.Tools.Deny)
	}
	must(cli(t, bin, url, "servers", "edit", "everything", "--unset-deny-tool", "add"), "edit 3")
	if got, _ := cliConfig(t, bin, url, "everything"); !slices.Equal(got.Tools.Deny, []string{"echo"}) {
		t.Fatalf("after --unset-deny-tool add: %v", got.Tools.Deny)
	}

	// Export in a client format warns, on stderr and in --json, naming the
	// tool filter that format cannot hold; our own format keeps it.
	r = must(cli(t, bin, url, "servers", "export", "--format", "mcpServers"), "export mcpServers")
	if !strings.Contains(r.Stderr, "warning: everything: the mcpServers format has no place for tool filters") || strings.Contains(r.Stderr, "other:") {
		t.Fatalf("export mcpServers did not say what it drops: %s", r)
	}
	r = must(cli(t, bin, url, "servers", "export", "--format", "mcpServers", "--json"), "export --json")
	var out model.ConfigExportReply
	if json.Unmarshal([]byte(r.Stdout), &out) != nil || len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "tools.allow/deny") {
		t.Fatalf("export --json warnings: %s", r.Stdout)
	}
	r = must(cli(t, bin, url, "servers", "export", "--format", "servers", "everything"), "export servers")
	if r.Stderr != "" || !strings.Contains(r.Stdout, `"echo"`) {
		t.Fatalf("export servers: %s", r)
	}

	// History counts per server, whatever the other server did meanwhile.
	must(cli(t, bin, url, "servers", "enable", "other"), "enable other")
	r = must(cli(t, bin, url, "servers", "history", "everything", "--json"), "history")
	var hist model.ConfigHistoryReply
	if json.Unmarshal([]byte(r.Stdout), &hist) != nil || len(hist.Revisions) != 4 {
		t.Fatalf("history: %s", r.Stdout)
	}
	for i, rev := range hist.Revisions {
		if rev.Version != uint64(i+1) {
			t.Fatalf("entry %d has version %d: %s", i, rev.Version, r.Stdout)
		}
	}
	r = must(cli(t, bin, url, "servers", "rollback", "everything", "2"), "rollback")
	if !strings.Contains(r.Stdout, "rolled back to version 2 (now version 5)") {
		t.Fatalf("rollback: %s", r)
	}
	if got, _ := cliConfig(t, bin, url, "everything"); !slices.Equal(got.Tools.Deny, []string{"echo"}) || got.Version != 5 {
		t.Fatalf("after rollback to 2: %+v", got)
	}
	if r := must(cli(t, bin, url, "servers", "history", "other"), "history other"); !strings.HasPrefix(strings.Split(r.Stdout, "\n")[1], "1 ") {
		t.Fatalf("history of other: %s", r.Stdout)
	}
}
