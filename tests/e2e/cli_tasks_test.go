package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestCLITasks drives `mcpbus tasks` against a real `mcpbus up`: run prints
// the id, ls lists it, get --wait prints the result, cancel of a long call
// ends it cancelled with notifications/cancelled at the server, run --wait
// prints the result, and a bad tool name is a clear error.
func TestCLITasks(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin
	dir := t.TempDir()
	// The server records its runs and cancels here: a dir of its own, which
	// the sandbox lets it write (--child-allow) and which holds no data dir.
	trace := t.TempDir()
	runs, cancelled := filepath.Join(trace, "runs"), filepath.Join(trace, "cancelled")
	servers := filepath.Join(dir, "servers.yaml")
	yaml := fmt.Sprintf("servers:\n  - name: slow\n    enabled: true\n    package: {type: binary, identifier: %q}\n    transport: {type: stdio}\n"+
		"    env_vars:\n      TESTMCP_RUN_FILE: {value: %q}\n      TESTMCP_CANCEL_FILE: {value: %q}\n", testServer, runs, cancelled)
	if err := os.WriteFile(servers, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data"), "--config", servers,
		"--child-allow", trace).NATSURL()
	waitCLIState(t, bin, url, "slow", model.StateRunning, 30*time.Second)
	runCount := func() int {
		data, _ := os.ReadFile(runs)
		return strings.Count(string(data), "\n")
	}

	// run prints the id at once; ls lists it; get --wait prints the result.
	r := cli(t, bin, url, "tasks", "run", "slow.sleep", `{"ms":1500}`)
	id := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("tasks run: %s, want the task id alone", r)
	}
	if r := cli(t, bin, url, "tasks", "ls"); r.Code != 0 || !strings.Contains(r.Stdout, id) || !strings.Contains(r.Stdout, "slow__sleep") {
		t.Errorf("tasks ls does not list %s: %s", id, r)
	}
	if r := cli(t, bin, url, "tasks", "get", id, "--wait", "30s"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "slept 1500ms" {
		t.Errorf("tasks get --wait: %s, want the result \"slept 1500ms\"", r)
	}
	if n := runCount(); n != 1 {
		t.Fatalf("the server recorded %d runs, want 1 (is %s writable by it?)", n, runs)
	}
	if r := cli(t, bin, url, "tasks", "ls", "--state", "completed", "--json"); !listed(r, id, model.TaskCompleted) {
		t.Errorf("tasks ls --state completed: %s, want %s completed", r, id)
	}

	// cancel of a long one: the task ends cancelled and the server hears it.
	r = cli(t, bin, url, "tasks", "run", "slow.sleep", `{"ms":60000}`)
	long := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || long == "" {
		t.Fatalf("tasks run (long): %s", r)
	}
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) { return runCount() == 2, "the long call has not reached the server" })
	if r := cli(t, bin, url, "tasks", "cancel", long); r.Code != 0 || strings.TrimSpace(r.Stdout) != long+" cancelled" {
		t.Errorf("tasks cancel: %s, want %q", r, long+" cancelled")
	}
	testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
		_, err := os.Stat(cancelled)
		return err == nil, "the server got no notifications/cancelled"
	})
	r = cli(t, bin, url, "tasks", "get", long, "--json")
	var got model.Task
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &got) != nil || got.State != model.TaskCancelled {
		t.Errorf("tasks get of the cancelled task: %s, want state cancelled", r)
	}
	if r := cli(t, bin, url, "tasks", "cancel", long); r.Code == 0 || !strings.Contains(r.Stderr, "CONFLICT") && !strings.Contains(strings.ToLower(r.Stderr), "ended") {
		t.Errorf("tasks cancel of an ended task: %s, want an error", r)
	}

	// run --wait starts, waits and prints the result.
	if r := cli(t, bin, url, "tasks", "run", "slow.sleep", `{"ms":500}`, "--wait"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "slept 500ms" {
		t.Errorf("tasks run --wait: %s, want the result \"slept 500ms\"", r)
	}

	// A bad tool name is a clear error and a failing exit code; nothing runs.
	if r := cli(t, bin, url, "tasks", "run", "slow.nosuchtool", `{}`); r.Code == 0 || !strings.Contains(r.Stderr, "nosuchtool") {
		t.Errorf("tasks run of an unknown tool: %s, want an error naming it", r)
	}
	if r := cli(t, bin, url, "tasks", "run", "nodot", `{}`); r.Code == 0 || !strings.Contains(r.Stderr, "<server>.<tool>") {
		t.Errorf("tasks run without <server>.<tool>: %s, want an error saying the form", r)
	}
	if n := runCount(); n != 3 {
		t.Errorf("the server ran %d calls, want 3 (the bad names run none)", n)
	}
}

// listed reports whether `tasks ls --json` output r has task id in state.
func listed(r clitest.Result, id, state string) bool {
	var l model.TaskListReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &l) != nil {
		return false
	}
	for _, t := range l.Tasks {
		if t.ID == id {
			return t.State == state
		}
	}
	return false
}
