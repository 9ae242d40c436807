package runner_test

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server that fails at every start is spawned MaxRestarts times in a
// series, its failed start included (issue 27: `servers add --enabled`
// spawned it 4 times for a limit of 3: the start, then 3 restarts).
func TestFailingStartSpawnsAtMostMaxRestarts(t *testing.T) {
	var logs syncBuffer
	opts := quickOpts()
	opts.RestartBackoff = 50 * time.Millisecond
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	e := runnertest.Start(t, opts)
	cfg, starts := startLogged(t, "failing", testServer)
	cfg.EnvVars["TESTMCP_FAIL_START"] = model.EnvVar{Value: "1"}
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(e.Status("failing").Message, "gave up") {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if n := spawns(t, starts); n != 3 {
		t.Fatalf("spawned %d times, want 3 (the failed start and 2 restarts): %+v", n, e.Status("failing"))
	}
	// The log counts the tries as the status does ("gave up after 3 tries").
	if msg := e.Status("failing").Message; !strings.Contains(msg, "gave up after 3 tries") {
		t.Fatalf("status %q", msg)
	}
	var attempts []int
	exhausted := -1
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg      string `json:"msg"`
			Attempt  int    `json:"attempt"`
			Attempts int    `json:"attempts"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Msg {
		case "server will restart":
			attempts = append(attempts, rec.Attempt)
		case "server keeps failing: automatic restarts exhausted":
			exhausted = rec.Attempts
		}
	}
	if !slices.Equal(attempts, []int{2, 3}) || exhausted != 3 {
		t.Errorf("log: restarts as attempts %v, exhausted after %d; want [2 3] and 3 (the failed start is the first try)", attempts, exhausted)
	}
}
