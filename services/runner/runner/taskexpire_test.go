package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// expireOpts is a runner whose tasks are bounded by a short task timeout:
// a task no run started within it ends failed.
func expireOpts(id string) runner.Options {
	o := taskOpts(id)
	o.TaskTimeout = 3 * time.Second
	return o
}

// finalEvent waits for the final task on events.task.<id> (progress events
// of a working task are skipped).
func finalEvent(t *testing.T, ch <-chan *nats.Msg, within time.Duration) model.Task {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case m := <-ch:
			var ev model.Task
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatalf("event: %s (%v)", m.Data, err)
			}
			if model.TaskFinal(ev.State) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no final event within %s", within)
		}
	}
}

// notStartedFailure checks a task ended failed by no run holding it: the
// error contract's code, message and field.
func notStartedFailure(t *testing.T, got model.Task, attempts int, says ...string) {
	t.Helper()
	if got.State != model.TaskFailed || got.Attempts != attempts || got.Error == nil ||
		got.Error.Code != apierr.ServiceUnavailable || got.Error.Field != "server" || got.Error.Message != got.Message {
		t.Fatalf("task %s: %+v (error %+v); want failed, %d attempts, SERVICE_UNAVAILABLE on server", got.ID, got, got.Error, attempts)
	}
	for _, s := range says {
		if !strings.Contains(got.Message, s) {
			t.Fatalf("task %s's reason %q does not say %q", got.ID, got.Message, s)
		}
	}
}

func subscribeTask(t *testing.T, e *runnertest.Env, id string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 16)
	sub, err := e.NC.ChanSubscribe("mcp.v1.events.task."+id, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// A server disabled while one task runs and another waits in its queue
// (max_inflight 1): neither has an owner any more. Both used to stay
// working until the retention (24 h) and then vanish as NOT_FOUND; now the
// queued one ends failed once the task timeout has passed since it was
// made, the one whose run stopped once it has passed since the run's own
// bound, each announced on events.task.<id> and listed as its principal's.
// Enabled again, the server runs neither. Two runners sweep: each task
// ends once (one final event), and its run leaves the queue.
func TestTaskQueuedForDisabledServerFails(t *testing.T) {
	e := runnertest.Start(t, expireOpts("r1"))
	e.AddRunner(t, expireOpts("r2"))
	cfg, runs := taskServer(t, "slow")
	cfg.Runtime.MaxInflight = 1
	cfg = e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	alice := principal.With(context.Background(), principal.Key("alice", false, model.ToolFilter{}))
	running, err := e.Client.CreateTask(alice, "slow", "sleep", json.RawMessage(`{"ms":30000}`))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); runCount(runs) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first task never started")
		}
	}
	queued, err := e.Client.CreateTask(alice, "slow", "echo", json.RawMessage(`{"message":"late"}`))
	if err != nil {
		t.Fatal(err)
	}
	queuedEvents, runningEvents := subscribeTask(t, e, queued.ID), subscribeTask(t, e, running.ID)
	cfg.Enabled = false
	cfg = e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateDisabled, 10*time.Second)

	got := taskResult(t, e.Client, alice, queued.ID, 15*time.Second)
	notStartedFailure(t, got, 0, "not started within 3s", "server slow is disabled")
	if ev := finalEvent(t, queuedEvents, 5*time.Second); ev.State != model.TaskFailed || ev.Message != got.Message {
		t.Fatalf("event of the queued task: %+v", ev)
	}
	got = taskResult(t, e.Client, alice, running.ID, 20*time.Second)
	notStartedFailure(t, got, 1, "stopped mid-call", "server slow is disabled")
	if ev := finalEvent(t, runningEvents, 5*time.Second); ev.State != model.TaskFailed {
		t.Fatalf("event of the stopped task: %+v", ev)
	}
	if list, err := e.Client.Tasks(alice, model.TaskFailed, false); err != nil || len(list) != 2 {
		t.Fatalf("alice lists %+v, %v; want her 2 failed tasks", list, err)
	}
	js, err := jetstream.New(e.NC)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := js.Stream(context.Background(), "MCP_TASKS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still queued after their tasks ended: %+v, %v", info, err)
		}
	}
	select {
	case m := <-queuedEvents:
		t.Fatalf("a second event of the queued task: %s", m.Data)
	case m := <-runningEvents:
		t.Fatalf("a second event of the stopped task: %s", m.Data)
	default:
	}

	cfg.Enabled = true
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	time.Sleep(2 * time.Second) // an owner again: a run left in the queue would start now
	if n := runCount(runs); n != 1 {
		t.Fatalf("%d runs after the server came back, want 1 (the first task's, before it was disabled)", n)
	}
	for _, id := range []string{queued.ID, running.ID} {
		if got, err := e.Client.Task(alice, id); err != nil || got.State != model.TaskFailed {
			t.Fatalf("task %s after the server came back: %+v, %v", id, got, err)
		}
	}
}

// No runner is alive while a task waits in the queue (its server's only
// runner stopped, the task queued behind a call that held its one
// max_inflight place) for longer than the task timeout. The queued task
// ends failed, never run: not when a runner comes back (it used to run
// then, however late), whether the new owner's claim or a sweep sees it
// first.
func TestTaskQueuedWhileNoRunnerAliveFails(t *testing.T) {
	e := runnertest.Start(t, expireOpts("r1"))
	cfg, runs := taskServer(t, "slow")
	cfg.Runtime.MaxInflight = 1
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	ctx := context.Background()
	running, err := e.Client.CreateTask(ctx, "slow", "sleep", json.RawMessage(`{"ms":30000}`))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); runCount(runs) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first task never started")
		}
	}
	queued, err := e.Client.CreateTask(ctx, "slow", "echo", json.RawMessage(`{"message":"late"}`))
	if err != nil {
		t.Fatal(err)
	}
	e.StopRunner(t)
	time.Sleep(4 * time.Second) // past the task timeout with no runner alive
	events := subscribeTask(t, e, queued.ID)
	e.StartRunner(t, expireOpts("r2"))
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)

	got := taskResult(t, e.Client, ctx, queued.ID, 15*time.Second)
	notStartedFailure(t, got, 0, "not started within 3s")
	if ev := finalEvent(t, events, 5*time.Second); ev.State != model.TaskFailed || ev.Message != got.Message {
		t.Fatalf("event: %+v", ev)
	}
	if got := taskResult(t, e.Client, ctx, running.ID, 15*time.Second); got.State != model.TaskFailed {
		t.Fatalf("the task whose runner stopped mid-call: %+v", got)
	}
	time.Sleep(time.Second)
	if n := runCount(runs); n != 1 {
		t.Fatalf("%d runs, want 1 (the first task's, before the runner stopped)", n)
	}
}
