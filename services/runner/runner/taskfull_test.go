package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestTasksCannotFillTheServer: one caller's task results fill at most the
// tasks bucket's bound, never the NATS server. nats-server refuses every
// write once the storage used passes its max (whatever a stream reserved),
// so tasks kept in an unbounded bucket (1000 a principal, 4 MiB each)
// stopped the audit stream, the events, the lease renewals and config
// writes for everyone. Past the bound a task ends failed saying the task
// store is full, or its creation is refused saying so; the server goes on
// taking the other writes, and tasks fit again once the old ones expire.
func TestTasksCannotFillTheServer(t *testing.T) {
	o := taskOpts("r1")
	// 4 results fill the bucket; they must not expire while it fills (a
	// loaded machine took over 2 s a task, and with 10 s of retention room
	// came back as fast as tasks were made: none was ever refused).
	o.TaskMaxBytes = 12 << 20
	o.TaskRetention = 30 * time.Second // room comes back as tasks expire
	e := runnertest.StartNATS(t, embednats.Options{MaxStore: 256 << 20}, o)
	cfg, _ := taskServer(t, "big")
	e.Put(t, cfg)
	e.WaitState(t, "big", model.StateRunning, 10*time.Second)
	alice := principal.With(context.Background(), principal.Key("alice", false, model.ToolFilter{}))
	args := json.RawMessage(fmt.Sprintf(`{"bytes":%d}`, 3<<20))
	refused := ""
	// 120 results of 3 MiB are more than the server's 256 MiB.
	for i := 0; i < 120 && refused == ""; i++ {
		task, err := e.Client.CreateTask(alice, "big", "large", args)
		if err != nil {
			if !strings.Contains(err.Error(), "task store is full") {
				t.Errorf("task %d refused: %v; want it to say the task store is full", i, err)
			}
			refused = err.Error()
			break
		}
		done := taskResult(t, e.Client, alice, task.ID, 30*time.Second)
		switch {
		case done.State == model.TaskCompleted:
		case done.State == model.TaskFailed && strings.Contains(done.Message, "task store is full"):
			if done.Error == nil || done.Error.Code != apierr.ServiceUnavailable {
				t.Fatalf("task %d failed with %+v; want SERVICE_UNAVAILABLE", i, done.Error)
			}
			refused = done.Message
		default:
			t.Fatalf("task %d: %s %q", i, done.State, done.Message)
		}
	}
	if refused == "" {
		t.Fatal("120 results of 3 MiB were all kept in a bucket bounded at 12 MiB")
	}
	t.Logf("refused: %s", refused)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The server still takes everyone else's writes: a config, an event.
	other, _ := taskServer(t, "other")
	e.Put(t, other)
	if _, err := e.JS.Publish(ctx, bus.NewSubjects("").Event("call", "big"), []byte(`{}`)); err != nil {
		t.Fatalf("an event after the tasks filled their bucket: %v", err)
	}
	// Room comes back as the tasks expire, without a restart.
	deadline := time.Now().Add(70 * time.Second)
	for {
		task, err := e.Client.CreateTask(alice, "big", "large", args)
		if err == nil {
			if done := taskResult(t, e.Client, alice, task.ID, 30*time.Second); done.State == model.TaskCompleted {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no task of 3 MiB completed within 70 s of the bucket filling (retention 30 s): %v", err)
		}
		time.Sleep(time.Second)
	}
}
