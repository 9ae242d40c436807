package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

func taskOpts(id string) runner.Options {
	o := ownershipOpts(id)
	o.TaskAckWait = 2 * time.Second
	return o
}

// taskServer is a test server whose sleep tools write a line per run to
// the returned file.
func taskServer(t *testing.T, name string) (model.McpConfig, string) {
	runs := filepath.Join(t.TempDir(), "runs")
	cfg := runnertest.Binary(name, testServer)
	cfg.Runtime.Eager = true
	cfg.EnvVars = map[string]model.EnvVar{"TESTMCP_RUN_FILE": {Value: runs}, "TESTMCP_CANCEL_FILE": {Value: runs + ".cancelled"}}
	return cfg, runs
}

func runCount(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

func taskResult(t *testing.T, c *client.Client, ctx context.Context, id string, within time.Duration) model.Task {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		task, err := c.TaskResult(ctx, id, 5*time.Second)
		if err != nil {
			t.Fatalf("task.result %s: %v", id, err)
		}
		if model.TaskFinal(task.State) {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s after %s: %+v", id, task.State, within, task)
		}
	}
}

// A task answers with its handle at once, outlives the connection that made
// it and the call timeout (it has its own), and its result is read later by
// handle from another connection; its completion is announced on
// events.task.<id>, without the result.
func TestTaskOutlivesItsCaller(t *testing.T) {
	o := taskOpts("r1")
	o.CallTimeout = time.Second // the 3 s sleep below would time out as a call
	e := runnertest.Start(t, o)
	cfg, runs := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)

	caller, err := e.NS.ConnectTCP()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	task, err := client.New(caller, client.Options{}).CreateTask(ctx, "slow", "sleep", json.RawMessage(`{"ms":3000}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("create took %s: it must answer before the call ends", d)
	}
	if task.State != model.TaskWorking || task.ID == "" || task.Name != "slow__sleep" || task.Principal != principal.KindOperator {
		t.Fatalf("handle: %+v", task)
	}
	events := make(chan *nats.Msg, 4)
	sub, err := e.NC.ChanSubscribe("mcp.v1.events.task."+task.ID, events)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	caller.Close() // the caller goes away mid-call

	got, err := e.Client.Task(ctx, task.ID)
	if err != nil || got.State != model.TaskWorking || got.Result != nil {
		t.Fatalf("get while working: %+v, %v", got, err)
	}
	done := taskResult(t, e.Client, ctx, task.ID, 20*time.Second)
	if done.State != model.TaskCompleted || text(t, done.Result) != "slept 3000ms" || done.Attempts != 1 || done.Runner != "r1" {
		t.Fatalf("result: %+v", done)
	}
	select {
	case m := <-events:
		var ev model.Task
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.State != model.TaskCompleted || ev.Result != nil {
			t.Fatalf("event: %s (%v)", m.Data, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no events.task event")
	}
	if n := runCount(runs); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
	list, err := e.Client.Tasks(ctx, model.TaskCompleted, false)
	if err != nil || len(list) != 1 || list[0].ID != task.ID {
		t.Fatalf("list: %+v, %v", list, err)
	}
}

// A task is its principal's: another one gets NOT_FOUND and does not list
// it; a tool the principal's own filter hides cannot be run as a task.
func TestTaskBelongsToItsPrincipal(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	alice := principal.With(context.Background(), principal.Key("alice", false, model.ToolFilter{}))
	bob := principal.With(context.Background(), principal.Key("bob", false, model.ToolFilter{}))
	task, err := e.Client.CreateTaskNamed(alice, "slow__echo", json.RawMessage(`{"message":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if done := taskResult(t, e.Client, alice, task.ID, 10*time.Second); text(t, done.Result) != "hi" {
		t.Fatalf("alice's result: %+v", done)
	}
	for name, f := range map[string]func() error{
		"get":    func() error { _, err := e.Client.Task(bob, task.ID); return err },
		"result": func() error { _, err := e.Client.TaskResult(bob, task.ID, 0); return err },
		"cancel": func() error { _, err := e.Client.CancelTask(bob, task.ID); return err },
	} {
		if err := f(); apierr.Of(err) != apierr.NotFound {
			t.Fatalf("bob's %s: %v, want NOT_FOUND", name, err)
		}
	}
	if list, err := e.Client.Tasks(bob, "", false); err != nil || len(list) != 0 {
		t.Fatalf("bob lists %+v, %v", list, err)
	}
	if list, err := e.Client.Tasks(alice, "", false); err != nil || len(list) != 1 {
		t.Fatalf("alice lists %+v, %v", list, err)
	}
	if list, err := e.Client.Tasks(alice, model.TaskCompleted, false); err != nil || len(list) != 1 {
		t.Fatalf("alice lists her completed tasks %+v, %v", list, err)
	}
	// A misspelt state is refused, not answered with an empty list.
	if _, err := e.Client.Tasks(alice, "complete", false); apierr.Of(err) != apierr.Validation || apierr.From(err).Field != "state" {
		t.Fatalf("an unknown state: %v, want VALIDATION_ERROR on state", err)
	}
	// The operator is an admin: it reads alice's task.
	if _, err := e.Client.Task(context.Background(), task.ID); err != nil {
		t.Fatalf("admin get: %v", err)
	}
	echoOnly := principal.With(context.Background(), principal.Key("carol", false, model.ToolFilter{Allow: []string{"slow__echo"}}))
	if _, err := e.Client.CreateTask(echoOnly, "slow", "sleep", json.RawMessage(`{"ms":1}`)); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("filtered tool as a task: %v, want NOT_FOUND", err)
	}
	if _, err := e.Client.CreateTask(alice, "slow", "nope", nil); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("unknown tool: %v, want NOT_FOUND", err)
	}
}

// A server whose slug is so long that its tools' namespaced names are
// shortened to 64 characters (the hash suffix takes the place of "__"):
// task.create by the listed name runs the tool, as a call by it does, and
// a name of no tool without "__" is still refused as malformed.
func TestTaskByShortenedName(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	slug := strings.Repeat("l", 60)
	cfg, _ := taskServer(t, slug)
	cfg.Slug = slug
	e.Put(t, cfg)
	e.WaitState(t, slug, model.StateRunning, 10*time.Second)
	name := model.NamespacedName(slug, "echo")
	if strings.Contains(name, "__") || len(name) != model.MaxNameLen {
		t.Fatalf("the test wants a shortened name without __, got %q", name)
	}
	ctx := context.Background()
	task, err := e.Client.CreateTaskNamed(ctx, name, json.RawMessage(`{"message":"long"}`))
	if err != nil {
		t.Fatalf("create by %s: %v", name, err)
	}
	if done := taskResult(t, e.Client, ctx, task.ID, 10*time.Second); done.State != model.TaskCompleted || text(t, done.Result) != "long" {
		t.Fatalf("result: %+v", done)
	}
	if _, err := e.Client.CreateTaskNamed(ctx, strings.Repeat("m", 64), nil); apierr.Of(err) != apierr.Validation {
		t.Fatalf("a name of no tool without __: %v, want VALIDATION_ERROR", err)
	}
}

// Cancelling a task ends it cancelled at once and reaches the server: the
// tool sees its call cancelled (notifications/cancelled).
func TestTaskCancelReachesServer(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, runs := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	ctx := context.Background()
	task, err := e.Client.CreateTask(ctx, "slow", "sleep", json.RawMessage(`{"ms":30000}`))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); runCount(runs) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the task never started")
		}
	}
	got, err := e.Client.CancelTask(ctx, task.ID)
	if err != nil || got.State != model.TaskCancelled {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(runs + ".cancelled"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the call cancelled")
		}
	}
	if _, err := e.Client.CancelTask(ctx, task.ID); apierr.Of(err) != apierr.Conflict {
		t.Fatalf("second cancel: %v, want CONFLICT", err)
	}
	time.Sleep(300 * time.Millisecond) // the run's own outcome must not replace cancelled
	if got, err := e.Client.TaskResult(ctx, task.ID, 0); err != nil || got.State != model.TaskCancelled || got.Result != nil {
		t.Fatalf("after cancel: %+v, %v", got, err)
	}
}

// A task's record and result are gone once the retention has passed.
func TestTaskRetention(t *testing.T) {
	o := taskOpts("r1")
	o.TaskRetention = 2 * time.Second
	e := runnertest.Start(t, o)
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	ctx := context.Background()
	task, err := e.Client.CreateTask(ctx, "slow", "echo", json.RawMessage(`{"message":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if done := taskResult(t, e.Client, ctx, task.ID, 10*time.Second); done.State != model.TaskCompleted || done.TTLMs != 2000 {
		t.Fatalf("result: %+v", done)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := e.Client.TaskResult(ctx, task.ID, 0)
		if apierr.Of(err) == apierr.NotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still there 10s after a 2s retention: %v", err)
		}
	}
}

// The owning runner dies mid-task: the new owner runs an idempotent tool
// again, once, and ends a task of any other tool failed with the reason.
func TestTaskOwnerDiesMidCall(t *testing.T) {
	for _, tc := range []struct {
		tool  string
		state string
		runs  int
	}{{"sleep_idempotent", model.TaskCompleted, 2}, {"sleep", model.TaskFailed, 1}} {
		t.Run(tc.tool, func(t *testing.T) {
			e := runnertest.Start(t, taskOpts("r1"))
			h2 := e.AddRunner(t, taskOpts("r2"))
			cfg, runs := taskServer(t, "slow")
			e.Put(t, cfg)
			st := e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
			ctx := context.Background()
			task, err := e.Client.CreateTask(ctx, "slow", tc.tool, json.RawMessage(`{"ms":4000}`))
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); runCount(runs) == 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the task never started")
				}
			}
			// Cut the owner off the bus without a goodbye, as a crash would.
			if st.Runner == "r1" {
				e.CutOff(t, e.RunnerNC)
			} else {
				h2.Disconnect(t, e)
			}
			done := taskResult(t, e.Client, ctx, task.ID, 30*time.Second)
			if done.State != tc.state || runCount(runs) != tc.runs || done.Runner == st.Runner && tc.runs == 2 {
				t.Fatalf("after the owner %s died: %+v, %d runs", st.Runner, done, runCount(runs))
			}
			if tc.state == model.TaskFailed && !strings.Contains(done.Message, "not marked idempotent") {
				t.Fatalf("failure without its reason: %q", done.Message)
			}
			if tc.state == model.TaskCompleted && text(t, done.Result) != "slept 4000ms" {
				t.Fatalf("re-run result: %s", done.Result)
			}
		})
	}
}

// Tasks beyond the server's max_inflight wait in the queue for room
// instead of failing as calls beyond it do.
func TestTasksWaitForRoom(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, runs := taskServer(t, "slow")
	cfg.Runtime.MaxInflight = 1
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	ctx := context.Background()
	var ids []string
	for range 3 {
		task, err := e.Client.CreateTask(ctx, "slow", "sleep", json.RawMessage(`{"ms":500}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	for _, id := range ids {
		if done := taskResult(t, e.Client, ctx, id, 30*time.Second); done.State != model.TaskCompleted || done.Attempts != 1 {
			t.Fatalf("task %s: %+v", id, done)
		}
	}
	if n := runCount(runs); n != 3 {
		t.Fatalf("%d runs, want 3", n)
	}
}

// One principal's tasks are bounded: past TaskMaxPerPrincipal its creates
// are RATE_LIMITED, while another principal still makes tasks, and the
// bookkeeping of the bound never shows as a task.
func TestTasksBoundedPerPrincipal(t *testing.T) {
	o := taskOpts("r1")
	o.TaskMaxPerPrincipal = 2
	e := runnertest.Start(t, o)
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	alice := principal.With(context.Background(), principal.Key("alice", false, model.ToolFilter{}))
	bob := principal.With(context.Background(), principal.Key("bob", false, model.ToolFilter{}))
	for range 2 {
		if _, err := e.Client.CreateTaskNamed(alice, "slow__echo", json.RawMessage(`{"message":"hi"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Client.CreateTaskNamed(alice, "slow__echo", json.RawMessage(`{"message":"hi"}`)); apierr.Of(err) != apierr.RateLimited {
		t.Fatalf("alice's third task: %v, want RATE_LIMITED", err)
	}
	if _, err := e.Client.CreateTaskNamed(bob, "slow__echo", json.RawMessage(`{"message":"hi"}`)); err != nil {
		t.Fatalf("bob's first task: %v", err)
	}
	if list, err := e.Client.Tasks(alice, "", false); err != nil || len(list) != 2 {
		t.Fatalf("alice lists %+v, %v; want her 2 tasks", list, err)
	}
	if list, err := e.Client.Tasks(context.Background(), "", true); err != nil || len(list) != 3 {
		t.Fatalf("the admin lists %+v, %v; want the 3 tasks", list, err)
	}
}

// A task that runs longer than the retention stays its principal's: it is
// listed, counts toward the bound and is found by the cancel that revoking
// its key makes (all read the owner entries, which expired with the
// retention while the run kept only the record alive).
func TestTaskLongerThanRetentionStaysListed(t *testing.T) {
	o := taskOpts("r1")
	o.TaskRetention = 2 * time.Second
	o.TaskMaxPerPrincipal = 1
	e := runnertest.Start(t, o)
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	alice := principal.With(context.Background(), principal.Key("alice", false, model.ToolFilter{}))
	task, err := e.Client.CreateTask(alice, "slow", "sleep", json.RawMessage(`{"ms":8000}`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // twice the retention
	if got, err := e.Client.Task(alice, task.ID); err != nil || got.State != model.TaskWorking {
		t.Fatalf("the task after twice its retention: %+v, %v; want working", got, err)
	}
	if list, err := e.Client.Tasks(alice, model.TaskWorking, false); err != nil || len(list) != 1 || list[0].ID != task.ID {
		t.Fatalf("alice lists %+v, %v; want her working task", list, err)
	}
	if _, err := e.Client.CreateTaskNamed(alice, "slow__echo", json.RawMessage(`{"message":"hi"}`)); apierr.Of(err) != apierr.RateLimited {
		t.Fatalf("a second task past a bound of 1: %v, want RATE_LIMITED", err)
	}
	if _, err := e.Client.CancelTask(alice, task.ID); err != nil {
		t.Fatal(err)
	}
}

// A result that fits a task record (4 MiB) but not the bus's max_payload
// (nats-server's default, 1 MiB, on a standalone server) fails its task
// saying it is too large, on its first run: its record's write used to be
// refused, the run was delivered again as if its runner had died, and the
// task failed as "stopped mid-call" (an idempotent tool ran again).
func TestTaskResultOverBusLimit(t *testing.T) {
	e := runnertest.StartNATS(t, embednats.Options{MaxPayload: 1 << 20}, taskOpts("r1"))
	cfg, _ := taskServer(t, "big")
	e.Put(t, cfg)
	e.WaitState(t, "big", model.StateRunning, 10*time.Second)
	ctx := context.Background()
	size := int(e.NC.MaxPayload()) + 512<<10
	task, err := e.Client.CreateTask(ctx, "big", "large", json.RawMessage(fmt.Sprintf(`{"bytes":%d}`, size)))
	if err != nil {
		t.Fatal(err)
	}
	done := taskResult(t, e.Client, ctx, task.ID, 20*time.Second)
	if done.State != model.TaskFailed || done.Attempts != 1 || !strings.Contains(done.Message, "larger than a task record may be") ||
		done.Error == nil || done.Error.Code != apierr.Validation {
		t.Fatalf("a result over the bus's max_payload: %+v (error %v)", done, done.Error)
	}
	if small, err := e.Client.CreateTask(ctx, "big", "echo", json.RawMessage(`{"message":"after"}`)); err != nil {
		t.Fatal(err)
	} else if got := taskResult(t, e.Client, ctx, small.ID, 10*time.Second); text(t, got.Result) != "after" {
		t.Fatalf("a task after the refused result: %+v", got)
	}
}

// A task id is a uuid in its canonical form, the record's key: another
// spelling uuid.Parse takes (urn:uuid:…, braces, no dashes) is
// VALIDATION_ERROR on id, as any malformed id; it was read as a key the
// bucket refuses and answered SERVICE_UNAVAILABLE.
func TestTaskIDSpellings(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	ctx := context.Background()
	id := "0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"
	for _, bad := range []string{"urn:uuid:" + id, "{" + id + "}", strings.ReplaceAll(id, "-", ""), "not-a-task"} {
		_, err := e.Client.Task(ctx, bad)
		if ae := apierr.From(err); ae.Code != apierr.Validation || ae.Field != "id" {
			t.Errorf("task.get %q: %v (field %q), want VALIDATION_ERROR on id", bad, err, ae.Field)
		}
	}
	if _, err := e.Client.Task(ctx, id); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("task.get of no task: %v, want NOT_FOUND", err)
	}
}

// taskRecordJSON is task id's record as KV mcp_tasks holds it, as any
// runner or operator reads it.
func taskRecordJSON(t *testing.T, e *runnertest.Env, id string) (string, map[string]json.RawMessage) {
	t.Helper()
	js, err := jetstream.New(e.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "mcp_tasks")
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatalf("record of task %s: %v", id, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(entry.Value(), &fields); err != nil {
		t.Fatal(err)
	}
	return string(entry.Value()), fields
}

// A task's record holds its call's arguments only while it works: once it
// ends (completed, blocked by the secret scan, cancelled) they are gone
// from KV mcp_tasks, which keeps the record for the retention, and so is
// its run from MCP_TASKS. What the API shows stays.
func TestEndedTaskKeepsNoArguments(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, runs := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	// A key's principal: its task's record carries the caller's principal
	// header for the run.
	ctx := principal.With(context.Background(), principal.Key("alice", false, model.ToolFilter{}))

	long, err := e.Client.CreateTask(ctx, "slow", "sleep", json.RawMessage(`{"ms":29417}`))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); runCount(runs) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the task never started")
		}
	}
	// While it works the run may need them (a re-run after its runner died).
	if raw, fields := taskRecordJSON(t, e, long.ID); string(fields["args"]) != `{"ms":29417}` || fields["principal_header"] == nil {
		t.Fatalf("a working task's record holds no arguments or principal header: %s", raw)
	}
	if _, err := e.Client.CancelTask(ctx, long.ID); err != nil {
		t.Fatal(err)
	}

	plain, err := e.Client.CreateTask(ctx, "slow", "echo", json.RawMessage(`{"message":"plain-arg-5h2k"}`))
	if err != nil {
		t.Fatal(err)
	}
	// secret_scan.arguments is block by default: the call is refused, the
	// server never sees the key.
	blocked, err := e.Client.CreateTask(ctx, "slow", "echo", json.RawMessage(`{"message":"key `+testAWSKey+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if done := taskResult(t, e.Client, ctx, plain.ID, 20*time.Second); done.State != model.TaskCompleted || text(t, done.Result) != "plain-arg-5h2k" {
		t.Fatalf("plain task: %+v", done)
	}
	if done := taskResult(t, e.Client, ctx, blocked.ID, 20*time.Second); done.State != model.TaskCompleted || !strings.Contains(text(t, done.Result), "aws-access-token") {
		t.Fatalf("blocked task: %+v", done)
	}
	time.Sleep(300 * time.Millisecond) // the cancelled run's own end writes nothing

	for _, tc := range []struct {
		id, arg string
		state   string
	}{
		{long.ID, "29417", model.TaskCancelled},
		{plain.ID, "", model.TaskCompleted}, // its result echoes it, as the API shows
		{blocked.ID, testAWSKey, model.TaskCompleted},
	} {
		raw, fields := taskRecordJSON(t, e, tc.id)
		if _, ok := fields["args"]; ok || tc.arg != "" && strings.Contains(raw, tc.arg) {
			t.Errorf("the record of ended task %s still holds its arguments: %s", tc.id, raw)
		}
		if _, ok := fields["principal_header"]; ok {
			t.Errorf("the record of ended task %s still holds the caller's principal header: %s", tc.id, raw)
		}
		got, err := e.Client.Task(ctx, tc.id)
		if err != nil || got.State != tc.state || got.Name != "slow__"+map[bool]string{true: "sleep", false: "echo"}[tc.id == long.ID] {
			t.Errorf("task.get of ended task %s: %+v, %v", tc.id, got, err)
		}
	}
	// Nor does the queue keep them: a run's message names its task only,
	// and an ended task's run is gone from the work queue.
	js, err := jetstream.New(e.NC)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := js.Stream(ctx, "MCP_TASKS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still queued after their tasks ended: %+v, %v", info, err)
		}
	}
}

// A durable task's run is a tool call like any other: it publishes a call
// event (on events.call.<server>, the copy the audit chain gets too) naming
// the task's principal and its request id (the task id). Before, runTask
// called the tool without one, so a call made as a task left no call event
// and no audit record.
func TestTaskRunPublishesACallEvent(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	events := callEvents(t, e, "slow", 4)
	ctx := principal.With(context.Background(), principal.Key("alice", false, model.ToolFilter{}))
	task, err := e.Client.CreateTask(ctx, "slow", "echo", json.RawMessage(`{"message":"as a task"}`))
	if err != nil {
		t.Fatal(err)
	}
	if done := taskResult(t, e.Client, ctx, task.ID, 20*time.Second); done.State != model.TaskCompleted {
		t.Fatalf("task: %+v", done)
	}
	select {
	case ev := <-events:
		if ev.Tool != "echo" || ev.Outcome != "ok" || ev.Principal != "key:alice" || ev.RequestID != task.ID {
			t.Fatalf("call event of the task's run: %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the task's run published no call event (nor an audit record)")
	}
}

// A task of a lazy server whose tools are not known yet (its first start,
// which learns them, still under way) starts the server as a call of the
// tool does, and runs; it was refused NOT_FOUND "has no tool" while a call
// answered. A tool the started server does not have is still NOT_FOUND.
func TestTaskStartsALazyServer(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	// A slow first start holds the window in which no catalog exists. The
	// server's path is an argument, which the sandbox grants.
	slow := filepath.Join(t.TempDir(), "slow-start")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nsleep 2\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.Put(t, runnertest.Binary("lazy", slow, testServer)) // lazy: not eager
	e.Put(t, runnertest.Binary("lazy2", slow, testServer))
	e.WaitState(t, "lazy", model.StateStarting, 10*time.Second)
	e.WaitState(t, "lazy2", model.StateStarting, 10*time.Second)

	ctx := context.Background()
	// A key whose filter hides the tool gets NOT_FOUND, the server unstarted for it.
	hidden := principal.With(ctx, principal.Key("dave", false, model.ToolFilter{Allow: []string{"other__*"}}))
	if _, err := e.Client.CreateTask(hidden, "lazy", "echo", json.RawMessage(`{}`)); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("a tool the key's filter hides: %v, want NOT_FOUND", err)
	}
	task, err := e.Client.CreateTask(ctx, "lazy", "echo", json.RawMessage(`{"message":"first"}`))
	if err != nil {
		t.Fatalf("a task of a server not started yet: %v, want it started as a call starts it", err)
	}
	if task.Name != "lazy__echo" || task.State != model.TaskWorking {
		t.Fatalf("handle: %+v", task)
	}
	if done := taskResult(t, e.Client, ctx, task.ID, 20*time.Second); done.State != model.TaskCompleted || text(t, done.Result) != "first" {
		t.Fatalf("result: %+v", done)
	}
	_, err = e.Client.CreateTask(ctx, "lazy", "nosuch", json.RawMessage(`{}`))
	if apierr.Of(err) != apierr.NotFound || !strings.Contains(err.Error(), `has no tool "nosuch"`) {
		t.Fatalf("a tool the server does not have: %v, want NOT_FOUND", err)
	}

	// A call made a task by Mcp-Task (the owner's call path) alike.
	msg := nats.NewMsg("mcp.v1.call.lazy2.echo")
	msg.Header.Set(bus.HeaderTask, "true")
	msg.Data = []byte(`{"message":"second"}`)
	reply, err := bus.Request(ctx, e.NC, msg, 20*time.Second)
	if err != nil {
		t.Fatalf("Mcp-Task call of a server not started yet: %v", err)
	}
	var handle model.Task
	if err := json.Unmarshal(reply.Data, &handle); err != nil || handle.Name != "lazy2__echo" {
		t.Fatalf("Mcp-Task handle: %s (%v)", reply.Data, err)
	}
	if done := taskResult(t, e.Client, ctx, handle.ID, 20*time.Second); done.State != model.TaskCompleted || text(t, done.Result) != "second" {
		t.Fatalf("Mcp-Task result: %+v", done)
	}
}
