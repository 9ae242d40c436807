package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
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
	fill, err := e.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fill"})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1<<20)
	for i := 0; ; i++ {
		if _, err := fill.Put(ctx, fmt.Sprint("k", i), val); err != nil {
			if !bus.StoreFull(err) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	time.Sleep(3 * time.Second) // twice the lease
	if err := e.JS.DeleteKeyValue(ctx, "fill"); err != nil {
		t.Fatal(err)
	}
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
