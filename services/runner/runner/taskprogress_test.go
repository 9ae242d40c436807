package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// taskTrail records every write of the tasks' records (KV mcp_tasks) and
// every task event, from before a test's task exists.
type taskTrail struct {
	kv     jetstream.KeyValue
	mu     sync.Mutex
	puts   []jetstream.KeyValueEntry
	events []model.Task
}

// lastSeq is the bucket's last revision: the task's writes are numbered
// after it, one each, while it is the only task (a watcher may miss a
// value that the next write of its key replaced; revisions count them all).
func (tr *taskTrail) lastSeq(t *testing.T) uint64 {
	t.Helper()
	st, err := tr.kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

func followTasks(t *testing.T, e *runnertest.Env) *taskTrail {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := e.JS.KeyValue(ctx, bus.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tr := &taskTrail{kv: kv}
	go func() {
		for en := range w.Updates() {
			if en != nil && en.Operation() == jetstream.KeyValuePut {
				tr.mu.Lock()
				tr.puts = append(tr.puts, en)
				tr.mu.Unlock()
			}
		}
	}()
	sub, err := e.NC.Subscribe("mcp.v1.events.task.*", func(m *nats.Msg) {
		var ev model.Task
		if json.Unmarshal(m.Data, &ev) == nil {
			tr.mu.Lock()
			tr.events = append(tr.events, ev)
			tr.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return tr
}

// of is task id's trail: its records as written, and its events.
func (tr *taskTrail) of(id string) (recs []model.Task, created []time.Time, events []model.Task) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, en := range tr.puts {
		var t model.Task
		if en.Key() == id && json.Unmarshal(en.Value(), &t) == nil {
			recs, created = append(recs, t), append(created, en.Created())
		}
	}
	for _, ev := range tr.events {
		if ev.ID == id {
			events = append(events, ev)
		}
	}
	return recs, created, events
}

// A task's progress is recorded while it runs: task.get shows it, each
// write is announced on events.task.<id>, writes are at least
// model.TaskProgressEvery apart however often the server reports, the
// final record keeps the last progress, and nothing is written after it.
func TestTaskProgressRecorded(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	trail := followTasks(t, e)
	ctx := context.Background()

	// 12 notifications over 3 s, one every 250 ms.
	before := trail.lastSeq(t)
	task, err := e.Client.CreateTask(ctx, "slow", "progress", json.RawMessage(`{"steps":12,"ms":250}`))
	if err != nil {
		t.Fatal(err)
	}
	var seen model.Task
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err := e.Client.Task(ctx, task.ID)
		if err != nil {
			t.Fatalf("task.get: %v", err)
		}
		if got.State == model.TaskWorking && got.Progress != nil {
			seen = got
			break
		}
		if model.TaskFinal(got.State) || time.Now().After(deadline) {
			t.Fatalf("no progress while the task worked: %+v", got)
		}
	}
	if p := seen.Progress; p.Total != 12 || p.Progress < 1 || p.Progress > 12 || p.Message != "step "+jsonNumber(p.Progress) {
		t.Fatalf("progress read by task.get: %+v", *p)
	}

	done := taskResult(t, e.Client, ctx, task.ID, 20*time.Second)
	if done.State != model.TaskCompleted || text(t, done.Result) != "done 12 steps" || done.Progress == nil || done.Progress.Progress != 12 {
		t.Fatalf("final task: %+v (progress %+v)", done, done.Progress)
	}
	time.Sleep(1500 * time.Millisecond) // a late write would land here
	recs, created, events := trail.of(task.ID)
	if len(recs) == 0 || recs[len(recs)-1].State != model.TaskCompleted {
		t.Fatalf("the last write of the record is not the outcome: %+v", recs)
	}
	if n := len(events); n == 0 || events[n-1].State != model.TaskCompleted {
		t.Fatalf("the last event is not the outcome: %+v", events)
	}
	// The bucket's revisions: the task's owner entry (taskquota.go), its
	// creation, its run's start, its progress writes, its outcome and the
	// owner entry again (taskstore.go). 12 notifications in 3 s make at
	// most 7 progress writes at one per 500 ms.
	final := trail.lastSeq(t)
	progressWrites := int(final-before) - 5
	if progressWrites < 2 || progressWrites > 7 {
		t.Fatalf("%d revisions of the task (%d progress writes) for 12 notifications over 3 s, want 2 to 7 progress writes",
			final-before, progressWrites)
	}
	var watched []time.Time // the progress writes the watcher saw
	for i, r := range recs {
		if r.State == model.TaskWorking && r.Progress != nil {
			watched = append(watched, created[i])
		}
	}
	for i := 1; i < len(watched); i++ {
		if gap := watched[i].Sub(watched[i-1]); gap < model.TaskProgressEvery-10*time.Millisecond {
			t.Fatalf("progress writes %d and %d are %s apart, want at least %s", i-1, i, gap, model.TaskProgressEvery)
		}
	}
	working := 0
	for _, ev := range events {
		if ev.State == model.TaskWorking {
			if ev.Progress == nil || ev.Result != nil {
				t.Fatalf("a working task event without progress (or with a result): %+v", ev)
			}
			working++
		}
	}
	t.Logf("12 notifications over 3 s: %d progress writes of the record, %d progress events", progressWrites, working)
	if working != progressWrites {
		t.Fatalf("%d progress events for %d progress writes: each write is announced once", working, progressWrites)
	}
}

// A task cancelled while its server keeps reporting progress stays
// cancelled: no progress is written over it.
func TestTaskProgressAfterCancel(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, _ := taskServer(t, "slow")
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	trail := followTasks(t, e)
	ctx := context.Background()

	task, err := e.Client.CreateTask(ctx, "slow", "progress", json.RawMessage(`{"steps":60,"ms":50}`))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := e.Client.Task(ctx, task.ID)
		if err == nil && got.Progress != nil {
			break
		}
		if err != nil || model.TaskFinal(got.State) || time.Now().After(deadline) {
			t.Fatalf("no progress while the task worked: %+v, %v", got, err)
		}
	}
	if got, err := e.Client.CancelTask(ctx, task.ID); err != nil || got.State != model.TaskCancelled {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	cancelled := trail.lastSeq(t)
	time.Sleep(2 * time.Second) // the server went on reporting; the run ended
	if now := trail.lastSeq(t); now != cancelled {
		t.Fatalf("%d writes of the record after it was cancelled", now-cancelled)
	}
	recs, _, events := trail.of(task.ID)
	cancelledAt := -1
	for i, r := range recs {
		if r.State == model.TaskCancelled {
			cancelledAt = i
			break
		}
	}
	if cancelledAt < 0 || cancelledAt != len(recs)-1 {
		t.Fatalf("writes of the record after it was cancelled: %d writes, cancelled at %d: %+v", len(recs), cancelledAt, recs[max(cancelledAt, 0):])
	}
	if got, err := e.Client.Task(ctx, task.ID); err != nil || got.State != model.TaskCancelled {
		t.Fatalf("after the run: %+v, %v", got, err)
	}
	if n := len(events); n == 0 || events[n-1].State != model.TaskCancelled {
		t.Fatalf("the last event is not the cancel: %+v", events)
	}
}

// jsonNumber writes a whole float as the test server's step message does.
func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// A task's progress messages are scanned for secrets as a server's error
// text is (gitleaks' rules, the known values), not only for the server's
// own secrets: they are kept in the record, announced on events.task.<id>
// (MCP_EVENTS keeps them for days) and shown to whoever reads the task.
func TestTaskProgressSecretsRedacted(t *testing.T) {
	e := runnertest.Start(t, taskOpts("r1"))
	cfg, _ := taskServer(t, "slow")
	cfg.SecretScan.Arguments = model.SecretsOff // the label reaches the server, which reports it
	e.Put(t, cfg)
	e.WaitState(t, "slow", model.StateRunning, 10*time.Second)
	trail := followTasks(t, e)
	ctx := context.Background()
	task, err := e.Client.CreateTask(ctx, "slow", "progress", json.RawMessage(`{"steps":6,"ms":250,"label":"key `+testAWSKey+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	done := taskResult(t, e.Client, ctx, task.ID, 20*time.Second)
	if done.State != model.TaskCompleted || done.Progress == nil {
		t.Fatalf("final task: %+v", done)
	}
	if !strings.Contains(done.Progress.Message, "[REDACTED:aws-access-token]") {
		t.Errorf("final progress: %q, want the key redacted", done.Progress.Message)
	}
	recs, _, events := trail.of(task.ID)
	working := 0
	for _, r := range append(recs, events...) {
		if r.Progress == nil {
			continue
		}
		working++
		if strings.Contains(r.Progress.Message, testAWSKey) {
			t.Fatalf("a progress message with the key, stored or announced: %q", r.Progress.Message)
		}
	}
	if working == 0 {
		t.Fatal("no progress recorded")
	}
}
