package client

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// CreateTask starts a tool call as a durable task and returns its handle
// (state working) at once; the call runs on the server's owner.
func (c *Client) CreateTask(ctx context.Context, server, tool string, args json.RawMessage) (model.Task, error) {
	var out model.Task
	err := bus.RequestJSON(ctx, c.nc, c.subj.Task("create"), model.TaskCreateRequest{Server: server, Tool: tool, Arguments: args}, &out, c.timeout)
	return out, err
}

// CreateTaskNamed is CreateTask with the namespaced name (<server>__<tool>).
func (c *Client) CreateTaskNamed(ctx context.Context, name string, args json.RawMessage) (model.Task, error) {
	var out model.Task
	err := bus.RequestJSON(ctx, c.nc, c.subj.Task("create"), model.TaskCreateRequest{Name: name, Arguments: args}, &out, c.timeout)
	return out, err
}

// Task reads a task (without its result).
func (c *Client) Task(ctx context.Context, id string) (model.Task, error) {
	var out model.Task
	err := bus.RequestJSON(ctx, c.nc, c.subj.Task("get"), model.TaskRequest{ID: id}, &out, c.timeout)
	return out, err
}

// TaskResult reads a task with its result, waiting up to wait (at most
// model.TaskMaxWait) for it to end; a task still working is returned so.
// The request waits no longer than wait and the client's timeout, even
// under a longer ctx: a request handed to a runner as it died is never
// answered, and a caller polling a task must get NETWORK_ERROR and ask
// again (a runner that lives will answer), not wait out its whole ctx.
func (c *Client) TaskResult(ctx context.Context, id string, wait time.Duration) (model.Task, error) {
	timeout := c.timeout
	if timeout <= 0 {
		timeout = bus.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait+timeout)
	defer cancel()
	var out model.Task
	err := bus.RequestJSON(ctx, c.nc, c.subj.Task("result"), model.TaskRequest{ID: id, WaitMs: wait.Milliseconds()}, &out, wait+timeout)
	return out, err
}

// CancelTask cancels a working task (CONFLICT when it has ended).
func (c *Client) CancelTask(ctx context.Context, id string) (model.Task, error) {
	var out model.Task
	err := bus.RequestJSON(ctx, c.nc, c.subj.Task("cancel"), model.TaskRequest{ID: id}, &out, c.timeout)
	return out, err
}

// Tasks lists the caller's tasks, newest first (all principals' with all,
// admins only), optionally of one state.
func (c *Client) Tasks(ctx context.Context, state string, all bool) ([]model.Task, error) {
	var out model.TaskListReply
	err := bus.RequestJSON(ctx, c.nc, c.subj.Task("list"), model.TaskListRequest{State: state, All: all}, &out, c.timeout)
	return out.Tasks, err
}
