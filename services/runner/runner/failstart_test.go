package runner_test

import (
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
	opts := quickOpts()
	opts.RestartBackoff = 50 * time.Millisecond
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
}
