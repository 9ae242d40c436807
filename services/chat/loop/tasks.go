package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TaskRunner runs tool calls as durable tasks (mcp.v1.task.*): a call that
// outlives the instance that made it. A ToolCaller that implements it runs
// the calls of the tools Deps.TaskTools names so; ClientTools does.
type TaskRunner interface {
	CreateTask(ctx context.Context, server, tool string, args json.RawMessage) (model.Task, error)
	// TaskResult waits up to wait for the task to end and returns it (with
	// its result once final).
	TaskResult(ctx context.Context, id string, wait time.Duration) (model.Task, error)
	CancelTask(ctx context.Context, id string) error
}

// DefaultTaskTimeout bounds the wait for a task's outcome: the runner's
// own default --task-timeout, after which the task has ended anyway.
const DefaultTaskTimeout = time.Hour

// ToolTask is the payload of a tool_call entry: the call of CallID runs
// as task TaskID. It is appended before the loop waits for the task, so a
// turn resumed by another instance waits for that task instead of calling
// the tool again.
type ToolTask struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Server string `json:"server"`
	TaskID string `json:"task_id"`
}

// errLogFailed is the cause of runCalls' cancellation of its other calls
// when an append failed: not the turn's end, so their tasks are kept.
var errLogFailed = errors.New("an append to the conversation log failed")

// CreateTask starts the call as a task in the principal of ctx.
func (c ClientTools) CreateTask(ctx context.Context, server, tool string, args json.RawMessage) (model.Task, error) {
	return c.C.CreateTask(ctx, server, tool, args)
}

// TaskResult waits for the task's outcome.
func (c ClientTools) TaskResult(ctx context.Context, id string, wait time.Duration) (model.Task, error) {
	return c.C.TaskResult(ctx, id, wait)
}

// CancelTask cancels the task.
func (c ClientTools) CancelTask(ctx context.Context, id string) error {
	_, err := c.C.CancelTask(ctx, id)
	return err
}

var _ TaskRunner = ClientTools{}

// taskRunner is the engine's TaskRunner when the tool's calls run as
// tasks (Deps.TaskTools names it), else nil.
func (t *turn) taskRunner(name string) TaskRunner {
	tr, ok := t.e.d.Tools.(TaskRunner)
	if !ok || len(t.e.d.TaskTools) == 0 || !(model.ChatToolFilter{Include: t.e.d.TaskTools}).Allows(name) {
		return nil
	}
	return tr
}

// startTask creates the call's task and records it in the log before
// anything waits for it, even when ctx ends meanwhile (a hand-off must not
// leave a running task unrecorded; the append is conditional, so it cannot
// land after another instance's entries). A task the log could not record
// is cancelled: no instance would ever read it.
func (t *turn) startTask(ctx context.Context, tr TaskRunner, c StepCall, tool model.Tool, args json.RawMessage) (ToolTask, error) {
	task, err := tr.CreateTask(ctx, tool.Server, tool.Tool, args)
	if err != nil {
		return ToolTask{}, err
	}
	tt := ToolTask{CallID: c.ID, Tool: c.Name, Server: tool.Server, TaskID: task.ID}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := t.append(actx, model.EntryToolCall, tt); err != nil {
		t.cancelTask(ctx, tr, tt.TaskID)
		return tt, err
	}
	return tt, nil
}

// awaitTask waits for the task's outcome, bounded by Deps.TaskTimeout: the
// CallToolResult of a completed task, else an error saying why it has none.
// timedOut reports the bound was reached (the task is cancelled then).
// When ctx ends the task is cancelled too, unless the turn is handed over
// (its next instance waits for the same task) or a log failure stopped it.
func (t *turn) awaitTask(ctx context.Context, tr TaskRunner, id string) (raw json.RawMessage, timedOut bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, t.e.d.TaskTimeout)
	defer cancel()
	for {
		left := time.Until(deadlineOf(wctx))
		task, err := tr.TaskResult(wctx, id, min(left, model.TaskMaxWait))
		switch {
		case ctx.Err() != nil:
			if c := context.Cause(ctx); !errors.Is(c, ErrHandOff) && !errors.Is(c, errLogFailed) {
				t.cancelTask(ctx, tr, id)
			}
			return nil, false, ctx.Err()
		case wctx.Err() != nil:
			t.cancelTask(ctx, tr, id)
			return nil, true, wctx.Err()
		case err != nil && apierr.Of(err) == apierr.NotFound:
			return nil, false, apierr.New(apierr.NotFound, fmt.Sprintf("its task %s is gone (past the task retention)", id))
		case err != nil:
			// A lost reply or a runner restarting: ask again, within the bound.
			t.e.d.Logger.Warn("chat: reading a task's result failed; asking again", "conversation", t.conv, "task", id, "err", err)
			select {
			case <-wctx.Done():
			case <-time.After(time.Second):
			}
			continue
		case task.State == model.TaskCompleted:
			return task.Result, false, nil
		case model.TaskFinal(task.State):
			if task.Error != nil {
				return nil, false, task.Error
			}
			return nil, false, apierr.New(apierr.ServiceUnavailable, fmt.Sprintf("its task ended %s: %s", task.State, task.Message))
		}
	}
}

// cancelTask cancels a task, best effort, even when ctx has ended.
func (t *turn) cancelTask(ctx context.Context, tr TaskRunner, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := tr.CancelTask(cctx, id); err != nil && apierr.Of(err) != apierr.Conflict {
		t.e.d.Logger.Warn("chat: cancelling a tool call's task failed", "conversation", t.conv, "task", id, "err", err)
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
