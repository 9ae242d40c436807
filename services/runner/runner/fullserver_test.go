package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A NATS server whose storage is used up refuses the runner's lease
// renewals (and every other write); once room is back the runner owns and
// serves its server again by itself, without a restart, and calls go
// through.
func TestRunnerRecoversAfterTheServerWasFull(t *testing.T) {
	e := runnertest.StartNATS(t, embednats.Options{MaxStore: 256 << 20}, ownershipOpts("r1"))
	cfg := runnertest.Binary("echo", testServer)
	cfg.Runtime.Eager = true
	e.Put(t, cfg)
	e.WaitState(t, "echo", model.StateRunning, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	free := testkit.FillStore(ctx, t, e.JS)
	time.Sleep(3 * time.Second) // twice the lease
	free()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		raw, err := e.Client.Call(cctx, "echo", "echo", json.RawMessage(`{"message":"back"}`), nil)
		ccancel()
		if err == nil && strings.Contains(string(raw), "back") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call went through 20 s after room came back: %v (status %+v)", err, e.Status("echo"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
