package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// fakeTaskTools is fakeTools that also runs calls as tasks, in memory: a
// task runs its tool's handler in the background until done or cancelled.
type fakeTaskTools struct {
	*fakeTools
	mu        sync.Mutex
	tasks     map[string]*fakeTask
	created   int
	cancelled []string
}

type fakeTask struct {
	task   model.Task
	done   chan struct{}
	cancel context.CancelFunc
}

func newFakeTasks(f *fakeTools) *fakeTaskTools {
	return &fakeTaskTools{fakeTools: f, tasks: map[string]*fakeTask{}}
}

func (f *fakeTaskTools) CreateTask(_ context.Context, server, tool string, args json.RawMessage) (model.Task, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ft := &fakeTask{task: model.Task{ID: uuid.NewString(), State: model.TaskWorking, Server: server, Tool: tool, Name: server + "__" + tool},
		done: make(chan struct{}), cancel: cancel}
	f.mu.Lock()
	f.tasks[ft.task.ID] = ft
	f.created++
	created := ft.task // the handle as made: the run below may finish it at once
	f.mu.Unlock()
	go func() {
		raw, err := f.Call(ctx, server, tool, args)
		f.finish(created.ID, raw, err)
	}()
	return created, nil
}

// put adds a task made elsewhere (by an instance that died).
func (f *fakeTaskTools) put(t model.Task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft := &fakeTask{task: t, done: make(chan struct{}), cancel: func() {}}
	if model.TaskFinal(t.State) {
		close(ft.done)
	}
	f.tasks[t.ID] = ft
}

func (f *fakeTaskTools) finish(id string, raw json.RawMessage, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft := f.tasks[id]
	if model.TaskFinal(ft.task.State) {
		return
	}
	if err != nil {
		ft.task.State, ft.task.Error = model.TaskFailed, apierr.From(err)
	} else {
		ft.task.State, ft.task.Result = model.TaskCompleted, raw
	}
	close(ft.done)
}

func (f *fakeTaskTools) TaskResult(ctx context.Context, id string, wait time.Duration) (model.Task, error) {
	f.mu.Lock()
	ft, ok := f.tasks[id]
	f.mu.Unlock()
	if !ok {
		return model.Task{}, apierr.Newf(apierr.NotFound, "no task %s", id)
	}
	select {
	case <-ft.done:
	case <-time.After(wait):
	case <-ctx.Done():
		return model.Task{}, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return ft.task, nil
}

func (f *fakeTaskTools) CancelTask(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft, ok := f.tasks[id]
	if !ok {
		return apierr.Newf(apierr.NotFound, "no task %s", id)
	}
	f.cancelled = append(f.cancelled, id)
	if model.TaskFinal(ft.task.State) {
		return apierr.New(apierr.Conflict, "the task has ended")
	}
	ft.task.State, ft.task.Message = model.TaskCancelled, "cancelled"
	ft.cancel()
	close(ft.done)
	return nil
}

func (f *fakeTaskTools) cancels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cancelled...)
}

// taskSetup is setup with the fake's calls of fake__* run as tasks.
func taskSetup(t *testing.T) (*harness, *fakeTaskTools) {
	t.Helper()
	var ft *fakeTaskTools
	h := setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) {
		ft = newFakeTasks(d.Tools.(*fakeTools))
		d.Tools, d.TaskTools = ft, []string{"fake__*"}
	})
	t.Cleanup(func() { // tasks left running (handed over) stop with the test
		ft.mu.Lock()
		defer ft.mu.Unlock()
		for _, x := range ft.tasks {
			x.cancel()
		}
	})
	return h, ft
}

// TestTaskToolCallLogsItsTask: a call of a tool the task list names runs
// as a task whose id is logged before its result.
func TestTaskToolCallLogsItsTask(t *testing.T) {
	h, ft := taskSetup(t)
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__echo", `{"message":"hi"}`)), llmtest.Text("done"))
	done, err := h.eng.RunTurn(ctxT(t), "tasked", h.prof, "echo hi")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	es := h.entries(t, "tasked")
	if got := kinds(es); got != "user_message,model_step,tool_call,tool_result,model_step,turn_end" {
		t.Fatalf("entries %s", got)
	}
	var tt loop.ToolTask
	if err := json.Unmarshal(es[2].Payload, &tt); err != nil || tt.TaskID == "" || tt.Server != "fake" || tt.Tool != "fake__echo" {
		t.Fatalf("tool_call entry %s: %v", es[2].Payload, err)
	}
	if ft.created != 1 || h.fake.count("fake__echo") != 1 {
		t.Fatalf("%d tasks, %d runs; want one of each", ft.created, h.fake.count("fake__echo"))
	}
	if rs := h.results(t, "tasked"); len(rs) != 1 || rs[0].Content != "echo: hi" || rs[0].State != model.ToolCallCompleted {
		t.Fatalf("results %+v", rs)
	}
	if got := strings.Join(h.ev.toolStates("fake__echo"), ","); got != "started,completed" {
		t.Fatalf("tool events %s", got)
	}
}

// TestResumeWaitsForTheTask: a turn resumed with a call whose task is
// logged reads that task's result and never calls the tool.
func TestResumeWaitsForTheTask(t *testing.T) {
	h, ft := taskSetup(t)
	const conv, turn = "resumed", "t1"
	appendRaw(t, h.log, conv, turn, model.EntryUserMessage, loop.UserMessage{Text: "echo once"})
	appendRaw(t, h.log, conv, turn, model.EntryModelStep, loop.ModelStep{Step: 1, ToolCalls: []loop.StepCall{
		{ID: "a", Name: "fake__echo", Arguments: `{"message":"once"}`}}})
	id := uuid.NewString()
	ft.put(model.Task{ID: id, State: model.TaskCompleted, Server: "fake", Tool: "echo", Result: textResult("echo: once, by the task")})
	appendRaw(t, h.log, conv, turn, model.EntryToolCall, loop.ToolTask{CallID: "a", Tool: "fake__echo", Server: "fake", TaskID: id})
	// ...and the instance died.
	h.srv.Enqueue(llmtest.Text("ok"))
	done, err := h.eng.Resume(ctxT(t), conv, h.prof)
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if n := h.fake.count("fake__echo"); n != 0 || ft.created != 0 {
		t.Fatalf("the tool ran %d times, %d tasks made; want none", n, ft.created)
	}
	if rs := h.results(t, conv); len(rs) != 1 || rs[0].Content != "echo: once, by the task" || rs[0].Server != "fake" {
		t.Fatalf("results %+v", rs)
	}
	if !strings.Contains(string(h.srv.Last().Body), "echo: once, by the task") {
		t.Fatalf("the task's result did not reach the model: %s", h.srv.Last().Body)
	}

	// A logged task that failed elsewhere ends the call failed with its reason.
	const conv2 = "resumed-failed"
	appendRaw(t, h.log, conv2, turn, model.EntryUserMessage, loop.UserMessage{Text: "echo once"})
	appendRaw(t, h.log, conv2, turn, model.EntryModelStep, loop.ModelStep{Step: 1, ToolCalls: []loop.StepCall{
		{ID: "b", Name: "fake__echo", Arguments: `{"message":"once"}`}}})
	failed := uuid.NewString()
	ft.put(model.Task{ID: failed, State: model.TaskFailed, Error: apierr.New(apierr.ServiceUnavailable, "the runner stopped mid-call")})
	appendRaw(t, h.log, conv2, turn, model.EntryToolCall, loop.ToolTask{CallID: "b", Tool: "fake__echo", Server: "fake", TaskID: failed})
	h.srv.Enqueue(llmtest.Text("it failed"))
	if _, err := h.eng.Resume(ctxT(t), conv2, h.prof); err != nil {
		t.Fatal(err)
	}
	if rs := h.results(t, conv2); len(rs) != 1 || rs[0].State != model.ToolCallFailed || !strings.Contains(rs[0].Content, "the runner stopped mid-call") {
		t.Fatalf("results %+v", rs)
	}
	if h.fake.count("fake__echo") != 0 {
		t.Fatal("the failed task's tool was run again")
	}
}

// TestTaskKeptOnHandOffCancelledOnCancel: a turn handed over leaves its
// running task for the next instance; a turn its user cancels cancels it.
func TestTaskKeptOnHandOffCancelledOnCancel(t *testing.T) {
	for _, handOff := range []bool{true, false} {
		h, ft := taskSetup(t)
		started := make(chan struct{}, 1)
		h.fake.handlers["fake__wait"] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call("fake__wait", `{}`)))
		ctx, cancel := context.WithCancelCause(ctxT(t))
		errc := make(chan error, 1)
		go func() {
			_, err := h.eng.RunTurn(ctx, "c", h.prof, "wait")
			errc <- err
		}()
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the task did not start")
		}
		cause := context.Canceled
		if handOff {
			cause = loop.ErrHandOff
		}
		cancel(cause)
		var err error
		select {
		case err = <-errc:
		case <-time.After(20 * time.Second):
			t.Fatal("the turn did not stop")
		}
		got := ft.cancels()
		if handOff {
			if !errors.Is(err, loop.ErrHandOff) || len(got) != 0 {
				t.Errorf("handed over: %v, cancels %v; want the task left running", err, got)
			}
			continue
		}
		if err != nil || len(got) != 1 {
			t.Errorf("cancelled: %v, cancels %v; want the task cancelled once", err, got)
		}
	}
}
