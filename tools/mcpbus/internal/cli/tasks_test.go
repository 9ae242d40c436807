package cli

import (
	"bytes"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestTasksShowProgress: a task of a real MCP server that reports progress
// over 4 s; while it works `mcpbus tasks get` prints its progress and
// `tasks ls` shows it as the message; once done, get prints the result.
func TestTasksShowProgress(t *testing.T) {
	t.Setenv("MCPBUS_DATA_DIR", t.TempDir()) // no operator seed of a real mcpbus up
	server, cleanup, err := testkit.BuildTestServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	e := runnertest.Start(t, runner.Options{ID: "r1", StopGrace: 100 * time.Millisecond, StartTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	cfg := runnertest.Binary("slow", server)
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 20*time.Second)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--nats", e.NS.ClientURL()}, args...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := run("tasks", "run", "slow.progress", `{"steps":8,"ms":500}`)
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("tasks run: %d %q %q", code, out, errOut)
	}
	step := regexp.MustCompile(`step ([1-8]) \(([1-8])/8\)`)
	var got string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, out, errOut := run("tasks", "get", id)
		if code != 0 {
			t.Fatalf("tasks get: %d %q %q", code, out, errOut)
		}
		if strings.Contains(out, " working ") && strings.Contains(out, "\nprogress: ") {
			got = out
			break
		}
		if !strings.Contains(out, " working ") || time.Now().After(deadline) {
			t.Fatalf("tasks get shows no progress while the task works: %q", out)
		}
	}
	if m := step.FindStringSubmatch(got); m == nil || m[1] != m[2] {
		t.Fatalf("tasks get: %q, want a line \"progress: step N (N/8)\"", got)
	}
	if code, out, errOut := run("tasks", "ls", "--state", "working"); code != 0 || !strings.Contains(out, id) || !step.MatchString(out) {
		t.Fatalf("tasks ls of the working task: %d %q %q, want its progress as the message", code, out, errOut)
	}
	if code, out, errOut := run("tasks", "get", id, "--wait", "30s"); code != 0 || strings.TrimSpace(out) != "done 8 steps" {
		t.Fatalf("tasks get --wait: %d %q %q, want the result", code, out, errOut)
	}
}
